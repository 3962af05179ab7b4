"""What a tenant may be called (docs/ingest.md#tenant-names).

A tenant's name is a key of every per-tenant row, a label on the page and a word in the short
answer, so it must be one short line of visible text, and it must never be the fleet's own
marker (``FLEET``, the tenant of every fleet-wide row): a tenant named ``*`` would be counted
as the fleet and every fleet figure would be written twice.

The rule, checked where a name enters (a flag, a field of a log line):
- not empty, and not only whitespace;
- printable: no control characters (newlines, tabs, escapes) and no unassigned or private-use
  code points (``str.isprintable``, which also refuses line and paragraph separators);
- at most ``MAX_TENANT_CHARS`` characters;
- not ``FLEET``.
"""

from __future__ import annotations

#: The tenant of every fleet-wide row, in every table and view.
FLEET = "*"

#: The longest tenant name accepted, in characters.
MAX_TENANT_CHARS = 256


def tenant_problem(name: object) -> str | None:
    """Why ``name`` cannot be a tenant's name, in a few words; None when it can."""
    if not isinstance(name, str):
        return "not a string"
    if not name.strip():
        return "empty"
    if len(name) > MAX_TENANT_CHARS:
        return f"longer than {MAX_TENANT_CHARS} characters"
    if name == FLEET:
        return f"{FLEET!r} is the fleet's own row"
    if not name.isprintable():
        return "holds a control or non-printable character"
    return None


def check_tenant(name: str, what: str = "tenant") -> str:
    """``name`` when it is a valid tenant name; else ValueError, one line naming ``what`` (the
    flag or field it came from) and the rule."""
    problem = tenant_problem(name)
    if problem is not None:
        shown = name[:40] + "…" if isinstance(name, str) and len(name) > 40 else name
        raise ValueError(
            f"{what} {shown!r} is not a valid tenant name ({problem}) — a tenant name is "
            f"1 to {MAX_TENANT_CHARS} printable characters and never {FLEET!r}"
        )
    return name

"""OpenTelemetry GenAI spans from OTLP JSON exports (``--format otlp``,
docs/ingest.md#opentelemetry-genai-spans-format-otlp).

A file is one ``ExportTraceServiceRequest`` as a JSON document (pretty-printed or not), or
JSON lines of them (what the Collector's file exporter writes), plain or gzip. Every span of
``resourceSpans[].scopeSpans[].spans[]`` is one input row, numbered in file order from 1 (its
``source.line``); a JSON line that does not parse, or holds no ``resourceSpans`` array, is one
row too, rejected. Each span is read from its attributes (``{"key", "value": AnyValue}``):

- the prompt from ``gen_ai.input.messages`` (a JSON string, or the structured value), after
  ``gen_ai.system_instructions``; a span without it is ``prompt_not_captured``;
- ``gen_ai.usage.input_tokens`` (which includes the cached tokens),
  ``gen_ai.usage.cache_read.input_tokens``, ``gen_ai.usage.cache_creation.input_tokens``,
  ``gen_ai.usage.output_tokens``;
- the session from ``gen_ai.conversation.id``, the request id from ``gen_ai.response.id``
  (else the span id), the arrival from ``startTimeUnixNano``;
- the tenant from the attribute ``--tenant-field`` names (a span's, else its resource's).

Only inference spans count (``gen_ai.operation.name`` ``chat``, ``text_completion``,
``generate_content``, or absent with other ``gen_ai.*`` attributes): an agent or tool span
would count its model calls twice; such a span is ``not_inference_span``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from prefixscope.ingest.formats.base import MAX_ARRIVAL_US, MIN_ARRIVAL_US, IngestOptions
from prefixscope.ingest.formats.openai import Request, finish_requests, loads
from prefixscope.ingest.formats.paths import parse_path
from prefixscope.ingest.formats.prompts import Problem, Prompt, flatten_content, kind
from prefixscope.ingest.formats.usage import Counts, Usage, check
from prefixscope.ingest.lines import FileReadState, read_line_batches

INFERENCE_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
ROWS_PER_BATCH = 4096
_DIGITS = re.compile(r"-?[0-9]+")
INPUT = "gen_ai.usage.input_tokens"
CACHE_READ = "gen_ai.usage.cache_read.input_tokens"
OUTPUT = "gen_ai.usage.output_tokens"


@dataclass(frozen=True)
class Otlp:
    name: str = "otlp"
    default_block_size: int = 16

    def batches(self, path: Path, state: FileReadState) -> Iterator[pa.Table]:
        raw = [r.as_py() for b in read_line_batches(path, state) for r in b.table["raw"]]
        rows = list(_rows(raw))
        cut = f"line {len(raw)} of the file is not valid JSON"
        if state.truncated is not None and rows and rows[-1][2] == cut:
            rows.pop()  # the cut tail itself: the truncated_file row stands for it
        if state.truncated is not None:  # the cut tail is one more row (staging marks it)
            state.truncated = (len(rows) + 1, state.truncated[1])
        state.lines = len(rows) + (state.truncated is not None)
        for start in range(0, len(rows), ROWS_PER_BATCH):
            part = rows[start : start + ROWS_PER_BATCH]
            yield pa.table(
                {
                    "line": pa.array(range(start + 1, start + 1 + len(part)), pa.int64()),
                    "raw": pa.array([p[0] for p in part], pa.large_binary()),
                    "reason": pa.array([p[1] for p in part], pa.string()),
                    "detail": pa.array([p[2] for p in part], pa.string()),
                }
            )

    def parse(
        self, con: duckdb.DuckDBPyConnection, batch: pa.Table, options: IngestOptions
    ) -> pa.Table:
        tenant_key = options.field("tenant")
        tenant_key = ".".join(parse_path(tenant_key)) if tenant_key else None
        reasons, details = batch["reason"].to_pylist(), batch["detail"].to_pylist()
        n = batch.num_rows
        arrival: list[int | None] = [None] * n
        tenants: list[str | None] = [options.tenant] * n
        sessions: list[str | None] = [None] * n
        ids: list[str | None] = [None] * n
        read: list[Request | None] = [None] * n
        for i, raw in enumerate(batch["raw"].to_pylist()):
            if reasons[i] is not None:
                continue
            try:
                got = _span(loads(raw.decode("utf-8")), tenant_key)
            except RecursionError:
                got = Problem("malformed_attribute", "an attribute nests too deeply to read")
            if isinstance(got, Problem):
                reasons[i], details[i] = got.reason, got.detail
                continue
            arrival[i], tenant, sessions[i], ids[i], read[i] = got
            tenants[i] = tenant if tenant_key else options.tenant
        rows = pa.table(
            {
                "line": batch["line"],
                "reason": pa.array(reasons, pa.string()),
                "detail": pa.array(details, pa.string()),
                "arrival_us": pa.array(arrival, pa.int64()),
                "tenant": pa.array(tenants, pa.string()),
                "session_id": pa.array(sessions, pa.string()),
                "log_request_id": pa.array(ids, pa.string()),
            }
        )
        return finish_requests(rows, read, options, options.block_size or self.default_block_size)


def _rows(lines: list[bytes]) -> Iterator[tuple[bytes | None, str | None, str | None]]:
    """``(span JSON, reason, detail)`` per row, in file order: one per span, or one rejected
    per line (or document) that holds no export request."""
    whole = b"\n".join(lines)
    try:
        requests = [(None, loads(whole.decode("utf-8")))] if whole.strip() else []
    except UnicodeDecodeError as exc:
        if _one_document(whole):  # one document, a byte of it not UTF-8: that is its fault
            yield None, "invalid_utf8", f"the document is not valid UTF-8 (byte {exc.start:,})"
            return
        requests = [(number, line) for number, line in enumerate(lines, 1) if line.strip()]
    except (ValueError, RecursionError):  # not one document: JSON lines of export requests
        requests = [(number, line) for number, line in enumerate(lines, 1) if line.strip()]
    for number, request in requests:
        where = f"line {number}" if number else "the document"
        if isinstance(request, bytes):
            try:
                request = loads(request.decode("utf-8"))
            except UnicodeDecodeError:
                yield None, "invalid_utf8", f"{where} of the file is not valid UTF-8"
                continue
            except ValueError:
                yield None, "invalid_json", f"{where} of the file is not valid JSON"
                continue
            except RecursionError:
                yield None, "invalid_json", f"{where} of the file nests too deeply to read"
                continue
        spans = _spans(request)
        if isinstance(spans, Problem):
            yield None, spans.reason, f"{where}: {spans.detail}"
            continue
        for span in spans:
            try:
                # a JSON escape of a lone surrogate (\\ud800) reads as a str no UTF-8 holds: the
                # span is refused here, or the file's tenant or model column fails whole
                json.dumps(span, ensure_ascii=False).encode("utf-8")
                yield json.dumps(span).encode(), None, None
            except RecursionError:
                yield None, "invalid_json", f"{where}: a span nests too deeply to read"
            except UnicodeEncodeError:
                yield None, "invalid_json", f"{where}: a string escapes a lone surrogate, no text"


def _one_document(whole: bytes) -> bool:
    """Whether ``whole`` is one JSON document once its bytes that are not UTF-8 are replaced."""
    try:
        loads(whole.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return False
    return True


def _spans(request: Any) -> list[dict[str, Any]] | Problem:
    """Every span of one export request, each with its resource's attributes under
    ``resource``."""
    if not isinstance(request, dict):
        return Problem("not_an_object", f"a JSON {kind(request).lower()}, expected an object")
    resources = request.get("resourceSpans")
    if not isinstance(resources, list):
        return Problem("missing_field", "missing or not an array: resourceSpans")
    out = []
    for r in resources:
        scopes = r.get("scopeSpans") if isinstance(r, dict) else None
        resource = r.get("resource") if isinstance(r, dict) else None
        attributes = resource.get("attributes", []) if isinstance(resource, dict) else []
        for scope in scopes if isinstance(scopes, list) else []:
            spans = scope.get("spans") if isinstance(scope, dict) else None
            for span in spans if isinstance(spans, list) else []:
                out.append({"span": span, "resource": attributes})
    return out


def any_value(value: Any) -> Any:
    """An OTLP ``AnyValue`` as plain JSON: ``stringValue``, ``intValue`` (a string of digits or
    a number), ``doubleValue``, ``boolValue``, ``arrayValue``, ``kvlistValue``, ``bytesValue``.
    Raises ValueError on anything else."""
    if not isinstance(value, dict) or len(value) != 1:
        raise ValueError("the value is not an AnyValue of one field")
    ((name, v),) = value.items()
    if name == "stringValue" and isinstance(v, str):
        return v
    if name == "intValue":
        if isinstance(v, str) and _DIGITS.fullmatch(v):
            return int(v)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    if name == "doubleValue" and isinstance(v, int | float | str) and not isinstance(v, bool):
        return float(v)
    if name == "boolValue" and isinstance(v, bool):
        return v
    if name == "bytesValue" and isinstance(v, str):
        return v
    if name == "arrayValue" and isinstance(v, dict):
        return [any_value(x) for x in v.get("values", [])]
    if name == "kvlistValue" and isinstance(v, dict):
        return attributes_of(v.get("values", []))
    raise ValueError(f"a {name} the OTLP JSON encoding does not allow")


def attributes_of(items: Any) -> dict[str, Any]:
    """A list of ``{"key", "value"}`` as a dict (the first of equal keys wins). Raises
    ValueError naming the position of a malformed one, never its key or value."""
    if not isinstance(items, list):
        raise ValueError(f"the attributes are {kind(items)}, expected an array")
    out: dict[str, Any] = {}
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            raise ValueError(f"attribute {i} has no string key")
        try:
            out.setdefault(item["key"], any_value(item.get("value")))
        except (ValueError, OverflowError) as exc:
            raise ValueError(f"attribute {i}: {exc}") from None
    return out


class _AttributeCounts(Counts):
    def label(self, keys: tuple[str, ...]) -> str:
        return f"attribute {'.'.join(keys)}"


def _span(
    wrapped: dict[str, Any], tenant_key: str | None
) -> tuple[int, str | None, str | None, str | None, Request] | Problem:
    """One span: its arrival (epoch µs), tenant, session, request id and request."""
    span = wrapped["span"]
    if not isinstance(span, dict):
        return Problem("not_an_object", f"the span is {kind(span)}, expected an object")
    try:
        attrs = attributes_of(span.get("attributes", []))
        resource = attributes_of(wrapped["resource"])
    except ValueError as exc:
        return Problem("malformed_attribute", f"the span's {exc}")
    operation = attrs.get("gen_ai.operation.name")
    if operation not in INFERENCE_OPERATIONS and (
        operation is not None or not any(k.startswith("gen_ai.") for k in attrs)
    ):
        return Problem(
            "not_inference_span",
            "gen_ai.operation.name is not chat, text_completion or generate_content (an agent, "
            "tool or non-GenAI span: its model calls have spans of their own)",
        )
    arrival = _start_us(span.get("startTimeUnixNano"))
    if isinstance(arrival, Problem):
        return arrival
    prompt = _prompt(attrs)
    if isinstance(prompt, Problem):
        return prompt
    counts = _AttributeCounts({k: v for k, v in attrs.items() if k.startswith("gen_ai.")}, "")
    # The names before semantic conventions 1.27 (prompt_tokens, completion_tokens) as fallbacks.
    usage = Usage(
        prompt_tokens=counts.get(_first(attrs, INPUT, "gen_ai.usage.prompt_tokens")),
        cached_tokens=counts.get(CACHE_READ),
        cache_creation_tokens=counts.get("gen_ai.usage.cache_creation.input_tokens"),
        output_tokens=counts.get(_first(attrs, OUTPUT, "gen_ai.usage.completion_tokens")),
    )
    problem = counts.problem or check(usage, None, f"attribute {CACHE_READ}")
    if problem is not None:
        return problem
    tenant = None
    if tenant_key is not None:
        tenant = _id(attrs.get(tenant_key, resource.get(tenant_key)))
        if tenant is None:
            return Problem("missing_field", f"missing, null or not an id: attribute {tenant_key}")
    session = _id(attrs.get("gen_ai.conversation.id"))
    request_id = _id(attrs.get("gen_ai.response.id")) or _id(span.get("spanId"))
    return arrival, tenant, session, request_id, Request(prompt, usage, None)


def _first(attrs: dict[str, Any], name: str, old: str) -> str:
    return name if name in attrs or old not in attrs else old


def _start_us(value: Any) -> int | Problem:
    if value is None:
        return Problem("missing_field", "missing or null: startTimeUnixNano")
    if isinstance(value, str) and _DIGITS.fullmatch(value):
        value = int(value)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        return Problem(
            "wrong_type", f"startTimeUnixNano is {kind(value)}, expected an integer of nanoseconds"
        )
    micros = value // 1000
    if not MIN_ARRIVAL_US <= micros < MAX_ARRIVAL_US:
        return Problem(
            "timestamp_out_of_range",
            "startTimeUnixNano lands outside 1970-01-01..2100-01-01",
        )
    return micros


def _prompt(attrs: dict[str, Any]) -> Prompt | Problem:
    """``gen_ai.system_instructions`` then ``gen_ai.input.messages`` as chat messages."""
    raw = attrs.get("gen_ai.input.messages")
    if raw is None:
        return Problem(
            "prompt_not_captured",
            "the span has no gen_ai.input.messages: the instrumentation did not record the "
            "prompt (turn on its message content capture)",
        )
    messages = _json_attribute(raw)
    if not isinstance(messages, list):
        return Problem(
            "wrong_type", "attribute gen_ai.input.messages is not a JSON array of messages"
        )
    out: list[dict[str, Any]] = []
    system = attrs.get("gen_ai.system_instructions")
    if system is not None:
        parts = _json_attribute(system)
        out.append({"role": "system", "content": _parts_text(parts)})
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") is None:
            return Problem(
                "missing_field", f"missing or null: attribute gen_ai.input.messages.{i}.role"
            )
        content = _parts_text(m["parts"]) if "parts" in m else flatten_content(m.get("content"))
        out.append({"role": m["role"], "content": content})
    return Prompt(messages=tuple(out))


def _json_attribute(value: Any) -> Any:
    """An attribute recorded as a JSON string, or in structured form."""
    if isinstance(value, str):
        try:
            return loads(value)
        except ValueError:
            return value
    return value


def _parts_text(parts: Any) -> str:
    """OTel message parts: ``text`` parts' ``content``, a placeholder for the others."""
    if isinstance(parts, str):
        return parts
    out = []
    for part in parts if isinstance(parts, list) else []:
        if isinstance(part, dict) and part.get("type") == "text":
            out.append(str(part.get("content", "")))
        elif isinstance(part, dict):
            out.append(f"<|{part.get('type', 'part')}|>")
    return "".join(out)


def _id(value: Any) -> str | None:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None

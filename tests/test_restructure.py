"""Prompt restructuring, what-if (``ingest --move-to-end``, ``prefixscope compare``): what a
pattern matches leaves its place for the end of the prompt, a conversation's history stays the
prefix of its next turn, hostile patterns are refused or time out as rejects, and a tenant that
stamps each prompt with its time wins back its reuse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.cli import main
from prefixscope.ingest import IngestOptions
from prefixscope.ingest.formats.openai import DEFAULT_CHAT_TEMPLATE, render
from prefixscope.ingest.formats.prompts import Prompt
from prefixscope.ingest.formats.restructure import (
    SEPARATOR,
    RestructureTimeout,
    check_patterns,
    move_text,
    move_to_end,
)
from prefixscope.stages.compare import compare_warehouses
from prefixscope.synthetic_gateway import GatewayWorkload, conversation_lines, write_lines

STAMP = r"Current time: [0-9T:.-]+Z\. "
#: Catastrophic backtracking on a line of a's that ends otherwise (``TIMEOUT_S`` per message).
SLOW = r"(a|aa)+$"


@pytest.mark.parametrize(
    ("text", "patterns", "want"),
    [
        ("no match here", [r"\d+"], "no match here"),
        ("t=12 ok", [r"\d+"], "t= ok\n12"),
        ("a1 b22 c333", [r"\d+"], "a b c\n1\n22\n333"),
        ("id=7 at 10:00", [r"id=\d+ ", r"\d\d:\d\d"], "at \nid=7 \n10:00"),
        ("x" * 3, [r"x"], "\nx\nx\nx"),  # everything moves: the rest is empty
    ],
)
def test_move_text(text: str, patterns: list[str], want: str) -> None:
    assert move_text(text, patterns) == want


@settings(max_examples=60, deadline=None)
@given(text=st.text(alphabet="ab1 2\t", max_size=40))
def test_what_moves_is_what_was_there(text: str) -> None:
    """The rest and the moved pieces hold the text's characters, one separator more per piece,
    and a text without a match comes back as it was."""
    out = move_text(text, [r"\d+"])
    digits = sum(c.isdigit() for c in text)
    if not digits:
        assert out == text
        return
    rest, *moved = out.split(SEPARATOR)
    assert not any(c.isdigit() for c in rest)
    assert all(m.isdigit() for m in moved)
    assert sorted(rest + "".join(moved)) == sorted(text)


def test_a_conversation_keeps_its_history_as_the_prefix_of_its_next_turn() -> None:
    """Each turn's stamp leaves the system prompt for the end of the prompt, so the first turn
    (its last message aside) renders as the start of the second."""

    def turn(stamp: str, *rest: dict) -> Prompt:
        system = {"role": "system", "content": f"Current time: {stamp}Z. Be brief."}
        return Prompt(messages=(system, *rest))

    first = turn("2026-01-01T10:00:00.000", {"role": "user", "content": "hello"})
    second = turn(
        "2026-01-01T10:05:00.000",
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": "more"},
    )
    a, b = (move_to_end(p, [STAMP]) for p in (first, second))
    assert a.messages[0]["content"] == b.messages[0]["content"] == "Be brief."
    assert b.messages[-1]["content"] == "more\nCurrent time: 2026-01-01T10:05:00.000Z. "
    ra, rb = (render(p, DEFAULT_CHAT_TEMPLATE) for p in (a, b))
    history = ra[: ra.index("hello") + len("hello")]  # the first turn up to its last message
    assert rb.startswith(history)
    # before: the two prompts part inside the system prompt's stamp
    r1, r2 = (render(p, DEFAULT_CHAT_TEMPLATE) for p in (first, second))
    assert not r2.startswith(r1[: r1.index("Be brief.")])


@pytest.mark.parametrize(
    "prompt",
    [
        Prompt(token_ids=(1, 2, 3)),
        Prompt(messages=({"role": "user", "content": "nothing to move"},), tools=[{"x": 1}]),
        Prompt(messages=()),
    ],
)
def test_a_prompt_with_nothing_to_move_is_the_same_prompt(prompt: Prompt) -> None:
    assert move_to_end(prompt, [r"\d{4}"]) is prompt


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("", "needs a pattern"),
        ("(", "is not a pattern"),
        ("a*", "matches the empty string"),
        ("(?:)", "matches the empty string"),
        ("x" * 1001, "is 1,001 characters"),
    ],
)
def test_a_pattern_that_cannot_be_used_is_refused_in_one_line(pattern: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        check_patterns([pattern])
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=message):
        IngestOptions(move_to_end=(pattern,))


def test_a_pattern_that_runs_away_times_out() -> None:
    with pytest.raises(RestructureTimeout):
        move_text("a" * 60 + "!", [SLOW])


def _chat_line(i: int, content: str) -> dict:
    return {
        "timestamp": 1_790_000_000 + i,
        "request": {"model": "m", "messages": [{"role": "user", "content": content}]},
        "response": {"usage": {"prompt_tokens": 5, "completion_tokens": 3}},
    }


def test_a_line_whose_pattern_times_out_is_a_reject_and_the_counts_add_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [_chat_line(0, "plain words"), _chat_line(1, "a" * 60 + "!"), _chat_line(2, "more")]
    log = write_lines(tmp_path / "log.jsonl", lines)
    wh = tmp_path / "wh.duckdb"
    argv = ["ingest", "--format", "openai", "--input", str(log), "--warehouse", str(wh)]
    assert main([*argv, "--move-to-end", SLOW]) == 0
    out = capsys.readouterr().out
    assert "3 lines = 2 accepted + 1 rejected" in out
    import duckdb

    with duckdb.connect(str(wh), read_only=True) as con:
        reasons = con.sql("SELECT reason FROM rejects").fetchall()
        params = con.sql("SELECT parameters FROM runs WHERE command = 'ingest'").fetchall()[0]
    assert reasons == [("restructure_timeout",)]
    assert json.loads(params[0])["options"]["move_to_end"] == [SLOW]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--format", "mooncake", "--move-to-end", "x"], "carries none"),
        (["--format", "openai", "--move-to-end", "("], "is not a pattern"),
        (["--format", "openai", "--move-to-end", ""], "needs a pattern"),
    ],
)
def test_hostile_move_to_end_flags_stop_before_any_file_is_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    log = write_lines(tmp_path / "log.jsonl", [_chat_line(0, "x")])
    wh = tmp_path / "wh.duckdb"
    assert main(["ingest", "--input", str(log), "--warehouse", str(wh), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not wh.exists()


def test_compare_refuses_a_warehouse_with_nothing_simulated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write_lines(tmp_path / "log.jsonl", [_chat_line(0, "x"), _chat_line(1, "y")])
    wh = tmp_path / "wh.duckdb"
    main(["ingest", "--format", "openai", "--input", str(log), "--warehouse", str(wh)])
    assert main(["compare", "--before", str(wh), "--after", str(wh)]) == 2
    assert "holds no hit rates" in capsys.readouterr().err


def test_a_tenant_that_stamps_its_prompts_wins_back_its_reuse(tmp_path: Path) -> None:
    """Generated logs where tenant ``stamped`` opens every system prompt with the request's
    time: as logged it hits almost nothing; moved to the end, it comes within 10 points of its
    ceiling, and the tenants that never stamped keep their ceiling."""
    workload = GatewayWorkload(
        sessions=120, tenants=("acme", "stamped"), stamped_tenants=("stamped",)
    )
    log = write_lines(tmp_path / "log.jsonl", conversation_lines(workload, seed=5))
    for name, extra in (("before", []), ("after", ["--move-to-end", STAMP])):
        wh = str(tmp_path / f"{name}.duckdb")
        ingest = ["ingest", "--format", "openai", "--input", str(log), "--warehouse", wh]
        assert main([*ingest, "--tenant-field", "user", *extra]) == 0
        assert (
            main(["simulate", "--warehouse", wh, "--policy", "lru", "--capacity-blocks", "800"])
            == 0
        )
    result = compare_warehouses(tmp_path / "before.duckdb", tmp_path / "after.duckdb")
    rows = {
        r["tenant"]: r
        for r in result.hit_rates.iter_rows(named=True)
        if r["measure_window"] == "all" and r["policy"] == "lru"
    }
    stamped, acme = rows["stamped"], rows["acme"]
    assert stamped["token_hit_rate_before"] < 0.05
    assert stamped["token_hit_rate_after"] > stamped["ceiling_token_hit_rate_after"] - 0.10
    assert stamped["ceiling_token_hit_rate_after"] > 0.5
    assert acme["ceiling_token_hit_rate_after"] == pytest.approx(
        acme["ceiling_token_hit_rate_before"]
    )

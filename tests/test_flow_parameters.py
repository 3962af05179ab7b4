"""The flow's parameters, declared once (``pipelines/flow_parameters.py``): every field is one
flag of ``fleet-report`` (and ``schedule``), every flag of the flow is a field, and what a
schedule stores comes back as the parameters it stored."""

from __future__ import annotations

import argparse
import json
from dataclasses import fields

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.cli.flows import fleet_report_arguments, flow_parameters, schedule_arguments
from prefixscope.pipelines.flow_parameters import FlowParameters

FIELDS = {f.name for f in fields(FlowParameters)}


def dests(build) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    p = argparse.ArgumentParser()
    build(p)
    out: dict[str, list[str]] = {}
    for action in p._actions:
        if action.option_strings and action.dest != "help":
            out.setdefault(action.dest, []).extend(action.option_strings)
    return out


@pytest.mark.parametrize(
    ("build", "own"),
    [(fleet_report_arguments, set()), (schedule_arguments, {"cron", "name"})],
)
def test_every_field_is_one_flag_and_every_flag_a_field(build, own) -> None:  # type: ignore[no-untyped-def]
    found = dests(build)
    assert set(found) - own == FIELDS
    assert all(len(flags) == 1 for flags in found.values()), found


def parse(argv: list[str]) -> FlowParameters:
    p = argparse.ArgumentParser()
    fleet_report_arguments(p)
    return flow_parameters(p.parse_args(argv))


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], {}),
        (["--policy", "lru,fifo"], {"policies": ("lru", "fifo")}),
        (["--capacity-blocks", "8,16"], {"capacities_blocks": (8, 16)}),
        (["--out", "p.html", "--metrics-out", "m.prom"],
         {"report_path": "p.html", "metrics_path": "m.prom"}),
        (["--window", "all", "--isolation", "salted"],
         {"windows": ("all",), "isolations": ("salted",)}),
        (["--slo", "ttft-p99=3", "--plan-target", "0.5", "--fresh"],
         {"slo": "ttft-p99=3", "plan_target": 0.5, "fresh": True}),
        (["--savings-policy", "fifo", "--savings-capacity-blocks", "64"],
         {"savings_policy": "fifo", "savings_capacity_blocks": 64}),
        (["--input", "b.jsonl"], {"inputs": ("a.jsonl", "b.jsonl")}),
    ],
)  # fmt: skip
def test_flags_land_in_their_fields_and_the_rest_keep_their_defaults(argv, expected) -> None:  # type: ignore[no-untyped-def]
    got = parse(["--input", "a.jsonl", *argv])
    want = FlowParameters(**{"inputs": ("a.jsonl",), **expected})
    assert got == want


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


@settings(deadline=None)  # the first example imports Prefect
@given(
    inputs=st.lists(names, min_size=1, max_size=3).map(tuple),
    policies=st.lists(names, max_size=3).map(tuple),
    capacities=st.lists(st.integers(1, 2**63 - 1), max_size=3).map(tuple),
    target=st.floats(0, 1),
    workers=st.integers(0, 64),
    metrics=st.none() | names,
)
def test_what_a_schedule_stores_comes_back_as_it_was(  # type: ignore[no-untyped-def]
    inputs, policies, capacities, target, workers, metrics
) -> None:
    from prefixscope.pipelines.fleet_report import fleet_report

    params = FlowParameters(
        inputs=inputs,
        policies=policies,
        capacities_blocks=capacities,
        plan_target=target,
        workers=workers,
        metrics_path=metrics,
    )
    stored = json.loads(json.dumps({"params": params.stored()}))
    assert fleet_report.validate_parameters(stored) == {"params": params}

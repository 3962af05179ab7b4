"""The stages: one function each, ``(warehouse, settings) -> result``, named for what it does
(``ingest.ingest_logs``, ``simulate.simulate_policies``, ``fleet.simulate_fleets``,
``plan_slo.plan_for_slo``, …).

A stage loads its inputs from the warehouse, calls the pure computation of ``analysis`` (or
``ingest``, ``gpu_replay``, ``dashboards``), and appends its tables under one recorded run
(``warehouse.StageRun``: the run recorded first, the inputs loaded from a read-only
connection, the results published with the run's close in one short transaction;
docs/operations.md). The command line and the Prefect tasks call exactly these functions;
neither opens the warehouse nor builds SQL itself. Settings are one frozen
dataclass per stage, recorded in ``runs.parameters``.

In data-flow order: ``ingest`` → ``simulate`` → ``curve`` → ``structure`` → ``replay`` →
``savings`` → ``report``.
"""

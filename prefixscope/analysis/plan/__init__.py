"""The capacity planner: what to buy to reach a target share of the ceiling (docs/plan.md)."""

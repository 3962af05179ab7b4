"""Simulation: replay a trace through every policy × capacity × isolation (a scenario each)
and measure each over its windows → the rows of ``hit_rates``, ``hit_rate_timeseries`` and
``request_outcomes``."""

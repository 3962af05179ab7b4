"""The model that serves the traffic in every line of the flow's report, and its GPU.

The bundled hour is Kimi's production traffic, whose model of the time is not published;
Moonshot's published Kimi-K2 has DeepSeek-V3's architecture (multi-head latent attention, 8 of
256+ routed experts), so the savings, the fleet, the capacity planner and the SLO plan all
price DeepSeek-V3 on the fewest H200s that hold it (h200x8). Light on purpose: the command
line reads it before any of the flow is imported.
"""

FLOW_MODEL = "deepseek-v3"
FLOW_GPU = "h200"

"""What the warehouse knows, in files other tools read: request traces in Mooncake's and
Bailian's formats (``trace.py``), and the latest figures as OpenMetrics text for Prometheus
(``metrics.py``). Every file is written whole or not at all (``atomic.py``)."""

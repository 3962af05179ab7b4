"""The trace: the warehouse's requests in replay order as CSR arrays over dense block ids, the
windows and steady state a hit rate is measured over, tenant isolation as a re-keying of the
trace, and the one measure module (hit tokens; the fleet row, then one per tenant)."""

"""vLLM's KV cache events: the capture file (:mod:`.framing`), the wire structs (:mod:`.wire`),
their rows (:mod:`.rows`) and the subscriber that captures them (:mod:`.capture`)."""

"""The performance model: prefill latency and decode step time (:mod:`.roofline`), fitted to measurements (:mod:`.calibration`)."""

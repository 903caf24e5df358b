"""The pages rendered from the studies' JSON: ``python -m benchmarks.pages`` writes docs/summary.md (with its figure),
docs/protocol.md and the README's summary table between its markers. Prose lives in each page's template beside its
renderer; numbers come only from the JSON."""

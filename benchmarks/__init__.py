"""vitpos's studies and benchmarks: each measures, writes JSON under docs/ with the provenance of every run, and the
pages are rendered from that JSON. Run one as a module from the checkout's root: ``python -m benchmarks.NAME``.
Nothing in vitpos/ imports this package."""

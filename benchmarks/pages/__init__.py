"""The pages rendered from the studies' JSON: ``python -m benchmarks.pages`` writes each docs/<page>.md (with its
figures) whose docs/<page>.json is there, and the README's summary table between its markers. One module per page
renders it; its prose lives in the template of the same name beside it (``string.Template``; a section shown only
where it has data has a template of its own), and every number comes from the JSON."""

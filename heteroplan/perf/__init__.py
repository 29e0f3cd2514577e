"""heteroplan.perf."""

"""heteroplan.runtime."""

"""heteroplan.policies."""

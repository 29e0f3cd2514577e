"""heteroplan.sim."""

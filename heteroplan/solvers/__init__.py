"""heteroplan.solvers."""

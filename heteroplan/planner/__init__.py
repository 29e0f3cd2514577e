"""heteroplan.planner."""

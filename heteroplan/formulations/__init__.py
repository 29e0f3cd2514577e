"""heteroplan.formulations."""

"""Deprecated location of the Model IR; it lives in :mod:`heteroplan.milp` now."""

import warnings

from heteroplan.milp.model import *  # noqa: F403
from heteroplan.milp.model import __all__  # noqa: F401

warnings.warn(
    "heteroplan.formulations.model moved to heteroplan.milp; import from there",
    DeprecationWarning,
    stacklevel=2,
)

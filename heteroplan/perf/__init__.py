"""heteroplan.perf: performance models.

Pollux/Sia goodput (this package's first part):

* :mod:`~heteroplan.perf.applications` -- catalogue of the Sia applications (:class:`AppSpec`).
* :mod:`~heteroplan.perf.throughput` -- step time / throughput model (:class:`ThroughputParams`).
* :mod:`~heteroplan.perf.efficiency` -- statistical efficiency and the phi table.
* :mod:`~heteroplan.perf.goodput` -- :class:`GoodputModel` (optimized goodput per
  configuration) and :class:`ThroughputTable` (rigid jobs).
* :mod:`~heteroplan.perf.fit` -- fitting parameters to observed steps.
* :mod:`~heteroplan.perf.bootstrap` -- :class:`BootstrappedModel` (Sia's online model).
* :mod:`~heteroplan.perf.protocols` -- what a performance model can do beyond its goodput, one
  ``typing.Protocol`` per capability (checked with ``isinstance``, never probed by name).
* :mod:`~heteroplan.perf.measurements` -- Sia trace readers.
* :mod:`~heteroplan.perf.sia_data` -- :func:`true_model` / :func:`bootstrap_model` from the
  shipped reference data.
"""

from heteroplan.perf.applications import APPLICATIONS, SIA_TYPE_NAMES, AppSpec, get_app
from heteroplan.perf.bootstrap import BootstrappedModel
from heteroplan.perf.efficiency import PhiTable
from heteroplan.perf.fit import fit_throughput_params
from heteroplan.perf.goodput import GoodputModel, ThroughputTable
from heteroplan.perf.measurements import Measurements, load_placements, load_scalability
from heteroplan.perf.sia_data import Estimator, bootstrap_model, true_model
from heteroplan.perf.throughput import ThroughputParams

__all__ = [
    "APPLICATIONS",
    "SIA_TYPE_NAMES",
    "AppSpec",
    "get_app",
    "BootstrappedModel",
    "Estimator",
    "PhiTable",
    "fit_throughput_params",
    "GoodputModel",
    "ThroughputTable",
    "ThroughputParams",
    "Measurements",
    "load_placements",
    "load_scalability",
    "bootstrap_model",
    "true_model",
]

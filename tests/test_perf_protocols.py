"""Capability protocols of the performance model (issue 48): the library asks a model what it can
do with ``isinstance`` against :mod:`heteroplan.perf.protocols`, never by probing its attributes."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import heteroplan
from heteroplan.cluster import preset
from heteroplan.errors import InputError
from heteroplan.perf import protocols as P
from heteroplan.perf.goodput import ThroughputTable
from heteroplan.perf.sia_data import bootstrap_model, true_model
from heteroplan.policies.base import PerfModel
from heteroplan.policies.registry import make_policy
from heteroplan.policies.requested_batch import RequestedBatchModel
from heteroplan.scheduling import SchedulingSession, StepTiming

CAPABILITIES = (P.Versioned, P.NoiseScaled, P.ObservesSteps, P.RecordsObservations, P.TakesMeasuredNoise,
                P.BatchThroughput, P.HasApplication, P.OptimizesBatch)
# the names a model's capabilities answer to: probing any of them by string is what the protocols replace
CAPABILITY_NAMES = frozenset(
    n for proto in (*CAPABILITIES, P.GoodputRate, PerfModel)
    for n in (*vars(proto), *getattr(proto, "__annotations__", {})) if not n.startswith("_")
) | {"observe_many", "step_time", "measured_phi"}
MODEL_WORDS = ("estimator", "perf_model", "model", "est")


def probes(source: str) -> list[tuple[int, str, str]]:
    """``(line, object, name)`` of every ``getattr(obj, "name"...)``/``hasattr(obj, "name")`` in
    ``source`` that names a model capability, or whose object is a performance model by its name."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2):
            continue
        obj, name = ast.unparse(node.args[0]), node.args[1]
        words = obj.replace(".", " ").replace("_", " ").split() + obj.split(".")
        attr = name.value if isinstance(name, ast.Constant) and isinstance(name.value, str) else ast.unparse(name)
        if attr in CAPABILITY_NAMES or any(w in MODEL_WORDS for w in words):
            out.append((node.lineno, node.col_offset, obj, attr))
    return [(line, obj, attr) for line, _, obj, attr in sorted(out)]


def test_the_probe_finder_finds_the_probes_the_protocols_replaced() -> None:
    old = '''
observe = getattr(job.estimator, "observe", None)
if not (hasattr(est, "throughput") and hasattr(est, "max_local_bsz")): pass
version = getattr(est, "version", None)
ok = callable(getattr(perf_model, "goodput", None))
value = getattr(self, name)
'''
    assert [(o, a) for _, o, a in probes(old)] == [
        ("job.estimator", "observe"), ("est", "throughput"), ("est", "max_local_bsz"), ("est", "version"),
        ("perf_model", "goodput")]


def test_no_getattr_or_hasattr_probes_a_performance_model_in_the_library() -> None:
    root = Path(heteroplan.__file__).parent
    found = [f"{path.relative_to(root.parent)}:{line}: ({obj}, {attr!r})"
             for path in sorted(root.rglob("*.py"))
             for line, obj, attr in probes(path.read_text())]
    assert found == [], "probe a performance model through heteroplan.perf.protocols instead:\n" + "\n".join(found)


@pytest.mark.parametrize(("model", "has"), [
    (lambda: true_model("cifar10"), {P.Versioned, P.NoiseScaled, P.TakesMeasuredNoise, P.BatchThroughput,
                                     P.HasApplication, P.OptimizesBatch}),
    (lambda: bootstrap_model("cifar10"), set(CAPABILITIES)),
    (lambda: RequestedBatchModel(true_model("cifar10"), 256), {P.Versioned, P.NoiseScaled}),
    (lambda: ThroughputTable({"a": 1.0}), set()),
], ids=["GoodputModel", "BootstrappedModel", "RequestedBatchModel", "ThroughputTable"])
def test_each_shipped_model_has_the_capabilities_the_protocols_module_lists(model, has) -> None:
    m = model()
    assert isinstance(m, P.GoodputRate) and isinstance(m, PerfModel)
    assert {c for c in CAPABILITIES if isinstance(m, c)} == has


class _RateOnly:
    """A user's model: a goodput and nothing else (no GPU types, no refit)."""

    def goodput(self, gpu_type, num_nodes, num_gpus, progress=0.0):
        return 1.0 * num_gpus


class _Observing(_RateOnly):
    def __init__(self) -> None:
        self.seen: list[tuple] = []
        self.phi: float | None = None

    def observe(self, gpu_type, placement, local_bsz, step_time, sync_time) -> None:
        self.seen.append((gpu_type, tuple(placement), local_bsz, step_time, sync_time))

    def set_measured_phi(self, phi) -> None:
        self.phi = phi


def test_the_session_feeds_a_model_only_what_its_protocols_say_it_takes() -> None:
    cluster = preset("sia-64")
    session = SchedulingSession(cluster, make_policy("fifo"))
    plain, observing = _RateOnly(), _Observing()
    session.submit("plain", arrival_time=0.0, perf_model=plain, total_work=10.0)
    session.submit("seen", arrival_time=0.0, perf_model=observing, total_work=10.0)
    timing = StepTiming(cluster.type_names[0], (2,), 8.0, 0.5, 0.1)
    for job in ("plain", "seen"):
        session.report(job, step_timing=timing, phi=30.0)
    assert observing.seen == [(cluster.type_names[0], (2,), 8.0, 0.5, 0.1)] and observing.phi == 30.0
    assert session.record("seen").observations == 1 and session.record("plain").observations == 0
    with pytest.raises(InputError, match="perf_model"):
        session.submit("bad", arrival_time=0.0, perf_model=object(), total_work=10.0)

"""The scheduling session: the one place a job's life is tracked (issue 30).

Oracles: the simulator's own results (the session's bookkeeping moved out of it unchanged),
hand-computed restart/service accounting for a scripted policy, a second process restoring a
saved session, and the same policy under two labels.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from heteroplan.cluster import Cluster, preset
from heteroplan.errors import InputError
from heteroplan.policies.base import Allocation, PolicyBase
from heteroplan.policies.registry import POLICIES, make_policy, register_policy
from heteroplan.scheduling import DecisionKind, SchedulingSession, UnreportedJobWarning
from heteroplan.sim import SimFidelity, simulate
from heteroplan.sim.job_models import build_jobs
from heteroplan.sim.training import SimulatedTraining
from heteroplan.workload.sia import bundled_workload

ROOT = Path(__file__).resolve().parent.parent
TWO_NODES = Cluster.from_counts(preset("sia-64").gpu_types, {"rtx": 16}, "two-rtx")  # 2 nodes of 8 rtx
R0, R1 = (n.name for n in TWO_NODES.nodes)


def _own_loop():
    spec = importlib.util.spec_from_file_location("own_loop", ROOT / "examples" / "own_loop.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("policy", ["sia", "pollux-sia", "gavel-sia", "fifo", "hadar"])
def test_own_loop_from_the_guide_reproduces_the_simulators_jct(policy: str) -> None:
    jobs = 8
    sim = simulate(bundled_workload("philly/workload-1")[:jobs], preset("sia-64"), make_policy(policy), progress=False)
    assert sim.summary()["finished"] == jobs
    assert _own_loop().run(policy, jobs) == pytest.approx(sim.summary()["avg_jct_h"], rel=1e-12)


def test_same_policy_under_two_labels_gives_identical_results() -> None:
    jobs = bundled_workload("philly/workload-1")[:6]
    plain = simulate(jobs, preset("sia-64"), make_policy("pollux-sia"), progress=False)
    relabelled = make_policy("pollux-sia")
    relabelled.name = "pollux-artifact"  # what a sweep label does
    other = simulate(jobs, preset("sia-64"), relabelled, progress=False)
    assert [(j.job_id, j.finish_time, j.restarts) for j in plain.jobs] == \
        [(j.job_id, j.finish_time, j.restarts) for j in other.jobs]
    assert other.summary()["avg_jct_h"] == plain.summary()["avg_jct_h"]
    # A fixed restart delay is the policy's option, not its name's: with it the result differs
    # from the applications' measured delays that pollux-sia's jobs pay by default.
    fixed = simulate(jobs, preset("sia-64"), make_policy("pollux-sia", restart_delay_s=30.0), progress=False)
    assert getattr(make_policy("pollux-sia"), "restart_delay_s", None) is None
    assert fixed.summary()["avg_jct_h"] != plain.summary()["avg_jct_h"]


class Scripted(PolicyBase):
    """Gives job "a" the allocation of the script's current round (None: nothing)."""

    def __init__(self, script: list[Allocation | None], **options) -> None:
        super().__init__(**options)
        self.script, self.calls = script, 0

    def allocate(self, cluster, jobs, now):
        alloc = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        return {} if alloc is None else {"a": alloc}


def test_decisions_restarts_restore_and_service_follow_the_allocations() -> None:
    two = Allocation("rtx", 2, ((R0, 2),))
    moved = Allocation("rtx", 2, ((R1, 2),))
    four = Allocation("rtx", 4, ((R0, 4),))
    policy = Scripted([two, two, moved, four, None, two])
    assert (policy.name, policy.round_length, policy.elastic, policy.forking) == ("scripted", 60.0, False, False)
    session = SchedulingSession(TWO_NODES, policy, free_moves=True)
    session.submit("a", arrival_time=0.0, application="cifar10", perf_model="oracle", restart_delay_s=90.0)
    kinds, restore, restarting = [], [], []
    for r in range(6):
        d = session.round(60.0 * r)["a"]
        kinds.append(d.kind)
        restore.append(d.restore_s)
        restarting.append(d.restart)
        session.report("a", work_done=10.0 * (r + 1))
    K = DecisionKind
    assert kinds == [K.START, K.KEEP, K.KEEP, K.RESCALE, K.PREEMPT, K.START]
    # 90 s restore: 30 s left in round 2; a free move keeps it; the rescale and the resume pay again.
    assert restore == [90.0, 30.0, 0.0, 90.0, 0.0, 90.0]
    assert restarting == [False, False, False, True, False, True]
    session.settle(360.0)
    record = session.record("a")
    assert record.restarts == 2 and record.start_time == 0.0
    assert record.gpu_seconds == 60.0 * (2 + 2 + 2 + 4 + 0 + 2)
    view = session.view("a")
    assert view.max_gpus_run == 4 and view.last_gpus == 2 and view.num_restarts == 2
    strict = SchedulingSession(TWO_NODES, Scripted([two, moved]), free_moves=False)
    strict.submit("a", arrival_time=0.0, application="cifar10", perf_model="oracle")
    strict.round(0.0)
    strict.report("a", work_done=1.0)
    assert strict.round(60.0)["a"].kind is K.RESCALE  # every move restarts without free moves


class _Solved:
    def __init__(self, gap: float) -> None:
        self.gap = gap


class ScriptedWithGap(Scripted):
    """Scripted, and reports a solve gap per round (a custom ReportsSolveGap policy)."""

    def __init__(self, script, gaps: list[float | None]) -> None:
        super().__init__(script)
        self.gaps, self.last_result = gaps, None

    def allocate(self, cluster, jobs, now):
        gap = self.gaps[min(self.calls, len(self.gaps) - 1)]
        self.last_result = None if gap is None else _Solved(gap)
        return super().allocate(cluster, jobs, now)


def test_a_custom_policy_reports_its_solve_gap_through_the_session() -> None:
    from heteroplan.policies.base import ReportsSolveGap

    two = Allocation("rtx", 2, ((R0, 2),))
    policy = ScriptedWithGap([two], gaps=[0.02, None, 0.0])
    assert isinstance(policy, ReportsSolveGap) and not isinstance(Scripted([two]), ReportsSolveGap)
    session = SchedulingSession(TWO_NODES, policy)
    session.submit("a", arrival_time=0.0, application="cifar10", perf_model="oracle")
    gaps = []
    for r in range(3):
        gaps.append(session.round(60.0 * r).solve_gap)
        session.report("a", work_done=1.0 + r)
    assert gaps == [0.02, None, 0.0]
    plain = SchedulingSession(TWO_NODES, Scripted([two]))
    plain.submit("a", arrival_time=0.0, application="cifar10", perf_model="oracle")
    assert plain.round(0.0).solve_gap is None


def test_a_job_the_caller_never_reports_on_is_not_starved() -> None:
    def gpus_over_rounds(assume: bool, report: bool) -> list[int]:
        session = SchedulingSession(preset("sia-64"), make_policy("sia"), assume_progress=assume)
        session.submit("c", arrival_time=0.0, application="cifar10")
        out = []
        for r in range(8):
            d = session.round(60.0 * r)["c"]
            out.append(d.allocation.num_gpus if d.allocation else 0)
            if report:
                session.report("c", work_done=1000.0 * (r + 1))
        return out

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reported = gpus_over_rounds(True, True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assumed = gpus_over_rounds(True, False)
    assert [w.category for w in caught] == [UnreportedJobWarning]  # once per job, not every round
    assert max(reported) > 1 and assumed == reported  # scaled up as if it had reported its progress
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert gpus_over_rounds(False, False) == reported  # the session carries its allocation
    assert [w.category for w in caught] == [UnreportedJobWarning]


_RESTORE = textwrap.dedent("""
    import json, sys
    from heteroplan.cluster import preset
    from heteroplan.policies.registry import make_policy
    from heteroplan.scheduling import SchedulingSession
    s = SchedulingSession.load(sys.argv[1], preset("sia-64"), make_policy("sia"))
    d = s.round(float(sys.argv[2]))
    print(json.dumps([[x.job_id, x.kind.value, repr(x.allocation), x.restore_s] for x in d]))
""")


def test_saved_session_gives_the_same_next_decisions_in_a_new_process(tmp_path: Path) -> None:
    cluster, policy, fidelity = preset("sia-64"), make_policy("sia"), SimFidelity()
    jobs = {j.name: j for j in build_jobs(bundled_workload("philly/workload-1")[:5], cluster, True, None, fidelity)}
    session = SchedulingSession(cluster, policy, free_moves=True)
    for j in jobs.values():
        session.submit(j.name, arrival_time=0.0, application=j.application, perf_model=j.estimator,
                       max_gpus=j.max_gpus, batch_size=j.given_batch, total_work=j.total_work)
    training = SimulatedTraining(cluster)
    for r in range(4):  # refits from reported step timings and noise scales
        for d in session.round(60.0 * r):
            training.run(jobs[d.job_id], d, 60.0, session.report)
    assert sum(session.record(j).observations for j in jobs) >= 5
    path = session.save(tmp_path / "session.json")
    json.loads(path.read_text())  # plain JSON
    here = [[x.job_id, x.kind.value, repr(x.allocation), x.restore_s] for x in session.round(240.0)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", _RESTORE, str(path), "240"], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == here
    assert any(kind != "keep" for _, kind, _, _ in here) or len({a for _, _, a, _ in here}) > 1


def test_session_rejects_bad_input_naming_the_field() -> None:
    session = SchedulingSession(TWO_NODES, make_policy("fifo"))
    with pytest.raises(InputError, match="total_work"):
        session.submit("x", arrival_time=0.0, application="mine", perf_model=_Table())
    with pytest.raises(InputError, match="perf_model"):
        session.submit("x", arrival_time=0.0, application="mine", perf_model="bootstrap", total_work=5.0)
    session.submit("x", arrival_time=0.0, application="mine", perf_model=_Table(), total_work=5.0)
    with pytest.raises(InputError, match="already submitted"):
        session.submit("x", arrival_time=0.0, application="mine", perf_model=_Table(), total_work=5.0)
    with pytest.raises(InputError, match="work_done"):
        session.report("x", work_done=-1.0)
    with pytest.raises(InputError, match="job_id"):
        session.report("nobody", work_done=1.0)
    session.round(60.0)
    with pytest.raises(InputError, match="now"):
        session.round(0.0)

def test_a_users_own_model_object_is_given_again_at_load(tmp_path: Path) -> None:
    """A model object is code: saved without it, it is handed back at load (by job id)."""
    session = SchedulingSession(TWO_NODES, make_policy("fifo"))
    session.submit("x", arrival_time=0.0, application="mine", perf_model=_Table(), total_work=5.0)
    session.round(0.0)
    session.report("x", work_done=2.0)
    path = session.save(tmp_path / "s.json")
    with pytest.raises(InputError, match="'x' was saved with a model object"):
        SchedulingSession.load(path, TWO_NODES, make_policy("fifo"))
    model = _Table()
    back = SchedulingSession.load(path, TWO_NODES, make_policy("fifo"), perf_models={"x": model})
    assert back.record("x") == session.record("x") and back.view("x").estimator is model


def test_a_job_saved_twice_is_refused_before_its_model_is_rebuilt(tmp_path: Path) -> None:
    """The second entry of a job id is named; its model (a user's object, not given) is never asked for."""
    session = SchedulingSession(TWO_NODES, make_policy("fifo"))
    session.submit("x", arrival_time=0.0, application="mine", perf_model=None, total_work=5.0)
    session.submit("y", arrival_time=0.0, application="mine", perf_model=_Table(), total_work=5.0)
    path = session.save(tmp_path / "s.json")
    data = json.loads(path.read_text())
    data["jobs"][1]["job_id"] = "x"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"session\.jobs\[1\]\.job_id='x': saved twice"):
        SchedulingSession.load(path, TWO_NODES, make_policy("fifo"))


class _Table:
    gpu_types = ("rtx",)

    def goodput(self, gpu_type, num_nodes, num_gpus, progress=0.0):
        return 1.0 * num_gpus


# -- the open registry -----------------------------------------------------------------------

class Greedy(PolicyBase):
    """Every job on its requested GPUs of the first type, first come first served."""

    def allocate(self, cluster, jobs, now):
        return make_policy("fifo").allocate(cluster, jobs, now)


def test_register_policy_makes_a_name_for_make_policy() -> None:
    register_policy("greedy-test", Greedy)
    try:
        policy = make_policy("greedy-test", round_length=120.0, restart_delay_s=5.0)
        assert (policy.name, policy.round_length, policy.restart_delay_s) == ("greedy", 120.0, 5.0)
        assert "greedy-test" in POLICIES
        with pytest.raises(InputError, match="built-in"):
            register_policy("sia", Greedy)
    finally:
        POLICIES._added.pop("greedy-test")


_PLUGIN = '''
from heteroplan.policies.base import PolicyBase
from heteroplan.policies.registry import make_policy


class PluginFifo(PolicyBase):
    """FIFO from an installed package."""

    def allocate(self, cluster, jobs, now):
        return make_policy("fifo").allocate(cluster, jobs, now)
'''

_SWEEP = '''
name = "plugin"
simulator = "sia"
jobs = 3
max_hours = 100

[[workloads]]
bundled = ["philly/workload-1"]

[[clusters]]
preset = "sia-64"

[[policies]]
name = "plugin-fifo"
'''


def test_a_policy_from_an_installed_package_is_a_cli_and_sweep_name(tmp_path: Path) -> None:
    site = tmp_path / "site"
    dist = site / "hp_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: hp-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[heteroplan.policies]\nplugin-fifo = hp_plugin:PluginFifo\n")
    (site / "hp_plugin.py").write_text(_PLUGIN)
    (tmp_path / "plugin.toml").write_text(_SWEEP)
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{site}")

    def cli(*args: str) -> subprocess.CompletedProcess:
        main = "import sys; from heteroplan.cli import main; sys.exit(main())"
        return subprocess.run([sys.executable, "-c", main, *args], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=300)

    helped = cli("simulate", "--help")
    assert helped.returncode == 0 and "plugin-fifo" in helped.stdout
    swept = cli("sweep", str(tmp_path / "plugin.toml"), "--out", str(tmp_path / "out"), "--inprocess", "--quiet")
    assert swept.returncode == 0, swept.stderr[-2000:]
    results = list((tmp_path / "out").rglob("*.json"))
    assert any("plugin-fifo" in p.read_text() for p in results)


def test_mixed_type_allocation_is_typed() -> None:
    cluster = preset("sia-64")
    aws, rtx = (next(n.name for n in cluster.nodes if n.gpu_type == t) for t in ("aws", "rtx"))
    mixed = Allocation.spanning(["aws", "rtx"], ((aws, 4), (rtx, 2)))
    assert mixed.mixed and mixed.gpu_types == ("aws", "rtx") and mixed.num_gpus == 6
    single = Allocation("rtx", 2, ((rtx, 2),))
    assert not single.mixed and single.gpu_types == ("rtx",)
    from heteroplan.policies.base import check_allocations, counts_by_type

    assert counts_by_type(mixed, cluster) == {"aws": 4, "rtx": 2}
    assert check_allocations(cluster, {"j": mixed}, ["j"]) == {"j": mixed}
    with pytest.raises(InputError, match="gpu_types"):
        Allocation.spanning([], ())

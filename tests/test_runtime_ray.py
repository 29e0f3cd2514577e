"""The round executor on a Ray cluster of three nodes with two GPU types (one CPU machine).

``ray.cluster_utils.Cluster`` starts a head (no GPUs) and two nodes that declare 2 GPUs each, typed
``A100`` and ``V100`` (``accelerator_type:<type>`` resources, as Ray sets on GPU machines): the
production code path -- placement groups pinned to the decision's nodes, actors running the
runtime's worker, gloo rendezvous at rank 0's node, checkpoints on a directory every node reaches.
"""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the runtime tests need torch: pip install torch==2.13.0")
ray = pytest.importorskip("ray", reason="Ray is optional: pip install 'heteroplan[ray]'")

from ray.cluster_utils import Cluster as RayTestCluster  # noqa: E402
from test_runtime_rounds import ScriptedPolicy  # noqa: E402

from heteroplan.cluster import GPUType  # noqa: E402
from heteroplan.errors import InputError  # noqa: E402
from heteroplan.runtime import RunConfig, TinyGPTTask, latest_checkpoint, train_reference  # noqa: E402
from heteroplan.runtime.config import StepEmulation  # noqa: E402
from heteroplan.runtime.layout import rank_layout  # noqa: E402
from heteroplan.runtime.ray_backend import RayBackend  # noqa: E402
from heteroplan.runtime.ray_cluster import cluster_from_ray, nodes_from_ray_state  # noqa: E402
from heteroplan.runtime.rounds import EventKind, RoundExecutor, RuntimeJob  # noqa: E402

TASK = TinyGPTTask(n_layers=1, dtype="float64")
# emulated GPUs: an iteration's compute lasts 0.05 s + 0.01 s (A100) or 0.02 s (V100) a sample, so
# how far a job gets in a round does not depend on the machine's load
EMULATE = StepEmulation({"A100": 0.01, "V100": 0.02}, overhead_s=0.05)
CONFIG = RunConfig(lr=0.05, momentum=0.9, startup_timeout_s=120.0, timeout_s=60.0, emulate=EMULATE)


def gpu_node(cluster: RayTestCluster, label: str, gpus: int = 2):
    return cluster.add_node(num_cpus=gpus, num_gpus=gpus, resources={f"accelerator_type:{label}": 1})


@pytest.fixture(scope="module")
def ray_cluster():
    os.environ.setdefault("RAY_prestart_worker_first_driver", "0")  # 2 cores: no idle workers importing at start
    cluster = RayTestCluster(initialize_head=True, head_node_args={"num_cpus": 0, "num_gpus": 0})
    nodes = {"A100": gpu_node(cluster, "A100"), "V100": gpu_node(cluster, "V100")}
    ray.init(address=cluster.address, log_to_driver=False, logging_level="WARNING")
    cluster.wait_for_nodes()
    yield cluster, nodes
    ray.shutdown()
    cluster.shutdown()


def nothing_left() -> tuple[list, list]:
    """Actors still alive and placement groups not removed."""
    from ray._private.state import actors

    alive = [a for a in actors().values() if a["State"] != "DEAD"]
    groups = [g for g in ray.util.placement_group_table().values() if g["state"] != "REMOVED"]
    return alive, groups


def ray_name(executor: RoundExecutor, label: str) -> str:
    return next(n.name for n in executor.session.cluster.nodes if n.gpu_type == label)


def assert_exact(tmp_path: Path, job_id: str, steps: int, batch: int) -> None:
    model, _ = train_reference(TASK, batch, RunConfig(steps=steps, lr=0.05, momentum=0.9))
    state = latest_checkpoint(tmp_path / job_id).model_state()
    assert max(float((state[k] - v).abs().max()) for k, v in model.state_dict().items()) < 1e-9


def test_cluster_is_read_from_ray(ray_cluster) -> None:
    _, nodes = ray_cluster
    read = cluster_from_ray(type_labels={"A100": "A100-40"})
    assert read.cluster.capacity() == {"A100-40": 2, "V100": 2}  # the head (no GPUs) is left out
    assert {read.node_ids[n.name] for n in read.cluster.nodes} == {nodes["A100"].node_id, nodes["V100"].node_id}
    assert read.cluster.gpu_type("V100").memory_gb == 16.0
    assert all(read.cpus[n.name] == 2 for n in read.cluster.nodes)


def test_ray_records_that_cannot_become_a_cluster() -> None:
    gpu = {"NodeID": "ab" * 28, "Alive": True, "Resources": {"GPU": 4.0, "CPU": 8.0}}
    with pytest.raises(InputError, match="accelerator type"):
        nodes_from_ray_state([gpu])
    with pytest.raises(InputError, match="XPU9"):
        nodes_from_ray_state([gpu | {"Resources": {"GPU": 4.0, "accelerator_type:XPU9": 1.0}}])
    custom = nodes_from_ray_state([gpu | {"Resources": {"GPU": 4.0, "accelerator_type:XPU9": 1.0}}],
                                  gpu_types=(GPUType("xpu", 32, 4),), type_labels={"XPU9": "xpu"})
    assert custom.cluster.capacity() == {"xpu": 4}
    with pytest.raises(InputError, match="no live node"):
        nodes_from_ray_state([gpu | {"Alive": False}])


def test_preempted_and_rescaled_across_nodes_of_both_types_trains_exactly(ray_cluster, tmp_path: Path) -> None:
    """1 GPU of the A100 node -> 2 of the V100 node -> preempted -> 2 of the A100 node: the parameters
    of uninterrupted training, every rank on the node and GPU count of its decision."""
    _, nodes = ray_cluster
    jobs = [RuntimeJob("a", TASK, steps=150, global_batch_size=6, config=CONFIG)]
    policy = ScriptedPolicy({"a": [("A100", 1), ("V100", 2), None, ("A100", 2)]})
    executor = RoundExecutor(None, policy, jobs, tmp_path, round_length=6.0, max_rounds=40, backend=RayBackend())
    outcome = executor.run()["a"]
    assert outcome.finish_time is not None and outcome.steps_done == 150 and outcome.failures == 0
    assert_exact(tmp_path, "a", 150, 6)
    ids = {"A100": nodes["A100"].node_id, "V100": nodes["V100"].node_id}
    launches = executor.placements["a"]
    assert [(a.gpu_type, a.num_gpus) for a, _ in launches][:3] == [("A100", 1), ("V100", 2), ("A100", 2)]
    for alloc, ranks in launches:
        (node, count), = alloc.placement
        assert [r.node_id for r in ranks] == [ids[alloc.gpu_type]] * count
        assert len({r.gpu_ids for r in ranks}) == count and all(len(r.gpu_ids) == 1 for r in ranks)
    kinds = [e.kind for r in executor.log for e in r.events]
    assert kinds.count(EventKind.START) == len(launches) and EventKind.STOP in kinds
    assert [lat.restart for lat in executor.latencies] == [False] + [True] * (len(executor.latencies) - 1)
    assert all(lat.seconds > 0 for lat in executor.latencies)
    assert nothing_left() == ([], [])


def test_a_killed_rank_restarts_from_the_last_checkpoint(ray_cluster, tmp_path: Path) -> None:
    config = replace(CONFIG, checkpoint_every=5)
    jobs = [RuntimeJob("k", TASK, steps=40, global_batch_size=4, config=config)]
    policy = ScriptedPolicy({"k": [("V100", 2)]})
    killed = []

    def kill_once(entry) -> None:  # after the first round: kill rank 1's actor
        run = executor._running.get("k")
        if not killed and run is not None and run.handle.steps:
            ray.kill(run.handle._actors[1])
            killed.append(run.handle.steps[-1].step)

    executor = RoundExecutor(None, policy, jobs, tmp_path, round_length=5.0, max_rounds=40,
                             backend=RayBackend(), progress=kill_once)
    outcome = executor.run()["k"]
    assert killed and outcome.finish_time is not None and outcome.failures == 1 and outcome.restarts >= 1
    fails = [e for r in executor.log for e in r.events if e.kind is EventKind.FAIL]
    assert len(fails) == 1 and "died" in fails[0].detail
    assert 0 <= outcome.steps_redone < 5 + 1  # at most the iterations since a checkpoint (every 5)
    assert_exact(tmp_path, "k", 40, 4)
    assert nothing_left() == ([], [])


def test_lost_node_restarts_elsewhere_and_a_new_node_is_used(ray_cluster, tmp_path: Path) -> None:
    """A job on a third node (typed A100): the node is removed mid-run -> the next round is decided
    on the GPUs left and the job resumes from its checkpoint; a node added later is scheduled on."""
    cluster, _ = ray_cluster
    extra = gpu_node(cluster, "A100")
    cluster.wait_for_nodes()
    config = replace(CONFIG, checkpoint_every=5)
    jobs = [RuntimeJob("n", TASK, steps=60, global_batch_size=4, config=config)]
    extra_name = f"A100-{extra.node_id[:8]}"

    class OnExtraNode(ScriptedPolicy):
        def allocate(self, c, js, now):
            from heteroplan.policies.base import Allocation

            self.round += 1
            nodes = {n.name: n for n in c.nodes}
            if extra_name in nodes:
                return {"n": Allocation("A100", 2, ((extra_name, 2),))}
            self.after_loss = getattr(self, "after_loss", 0) + 1
            node = next(n for n in c.nodes if n.gpu_type == "V100")
            return {"n": Allocation("V100", 1, ((node.name, 1),))}

    policy = OnExtraNode({})
    removed: list[int] = []

    def remove_once(entry) -> None:
        run = executor._running.get("n")
        if not removed and run is not None and run.handle.steps:
            cluster.remove_node(extra)
            removed.append(run.handle.steps[-1].step)

    executor = RoundExecutor(None, policy, jobs, tmp_path, round_length=5.0, max_rounds=60,
                             backend=RayBackend(), progress=remove_once)
    outcome = executor.run()["n"]
    assert removed and outcome.finish_time is not None and outcome.failures == 1
    events = [e for r in executor.log for e in r.events]
    assert any(e.kind is EventKind.NODE_LOST and e.job_id == extra_name for e in events)
    assert extra_name not in {n.name for n in executor.session.cluster.nodes}
    assert policy.after_loss >= 1  # decided on the GPUs left
    assert_exact(tmp_path, "n", 60, 4)
    assert nothing_left() == ([], [])
    # a node added between rounds is in the next round's cluster
    added = gpu_node(cluster, "A100")
    cluster.wait_for_nodes()
    backend = RayBackend()
    assert f"A100-{added.node_id[:8]}" in {n.name for n in backend.cluster().nodes}
    cluster.remove_node(added)


def test_a_job_that_keeps_failing_is_given_up_with_its_reason(ray_cluster, tmp_path: Path) -> None:
    config = replace(CONFIG, fault=("exit", 1, 2))
    jobs = [RuntimeJob("f", TASK, steps=50, global_batch_size=4, config=config),
            RuntimeJob("ok", TASK, steps=10, global_batch_size=4, config=CONFIG)]
    policy = ScriptedPolicy({"f": [("V100", 2)], "ok": [("A100", 1)]})
    executor = RoundExecutor(None, policy, jobs, tmp_path, round_length=4.0, max_rounds=30,
                             backend=RayBackend(), max_failures=2)
    outcomes = executor.run()
    assert outcomes["f"].failures == 2 and outcomes["f"].finish_time is None
    assert "failed 2 times" in outcomes["f"].gave_up
    assert outcomes["ok"].finish_time is not None and outcomes["ok"].gave_up is None
    assert executor.session.unfinished() == ()
    assert nothing_left() == ([], [])


def test_sigint_checkpoints_and_a_new_executor_resumes_without_losing_a_job(ray_cluster, tmp_path: Path) -> None:
    jobs = [RuntimeJob("s", TASK, steps=80, global_batch_size=6, config=CONFIG)]
    policy = ScriptedPolicy({"s": [("V100", 2)]})
    executor = RoundExecutor(None, policy, jobs, tmp_path, round_length=3.0, max_rounds=100, backend=RayBackend())

    sent: list[bool] = []

    def interrupt(entry) -> None:  # once the job trains: Ctrl-C, then a second one during the clean-up
        run = executor._running.get("s")
        if run is not None and run.handle.steps and not sent:
            sent.append(True)
            threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT)).start()
            threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()

    executor.progress = interrupt
    first = executor.run()["s"]
    assert first.finish_time is None and 0 < first.steps_done < 80
    assert latest_checkpoint(tmp_path / "s").step == first.steps_done  # stopped at a boundary, checkpointed
    assert nothing_left() == ([], [])
    resumed = RoundExecutor(None, ScriptedPolicy({"s": [("A100", 2)]}), jobs, tmp_path, round_length=3.0,
                            max_rounds=100, backend=RayBackend(), resume=True)
    assert resumed.session.record("s").steps_done == first.steps_done
    outcome = resumed.run()["s"]
    assert outcome.finish_time is not None and outcome.finish_time > first.arrival_time
    assert_exact(tmp_path, "s", 80, 6)
    assert nothing_left() == ([], [])


def test_a_checkpoint_path_a_node_cannot_write_is_refused(ray_cluster) -> None:
    from heteroplan.policies.base import Allocation
    from heteroplan.runtime.rounds import data_parallel_plan

    backend = RayBackend()
    node = next(n.name for n in backend.cluster().nodes if n.gpu_type == "A100")
    plan = data_parallel_plan("w", 2, 1, 3, "A100")
    with pytest.raises(InputError, match="checkpoint_dir"):
        backend.launch("w", plan, Allocation("A100", 1, ((node, 1),)), TASK,
                       replace(CONFIG, checkpoint_dir="/proc/heteroplan-cannot-write"))
    assert nothing_left() == ([], [])


def test_the_cluster_guide_runs_as_written(ray_cluster, tmp_path: Path) -> None:
    """docs/cluster.md's Python block on this Ray cluster (its path replaced by a temporary one)."""
    import re

    text = (Path(__file__).parent.parent / "docs" / "cluster.md").read_text()
    block, = [b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "RayBackend" in b]
    assert '"/shared/heteroplan"' in block
    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(compile(block.replace('"/shared/heteroplan"', repr(str(tmp_path))), "cluster.md", "exec"), namespace)  # noqa: S102
    records, executor = namespace["records"], namespace["executor"]
    events = [str(e) for r in executor.log for e in r.events]
    assert len(records) == 4 and all(r.finish_time is not None and r.failures == 0 for r in records.values()), events
    steps = {j.job_id: j.steps for j in namespace["jobs"]}
    assert all(latest_checkpoint(tmp_path / j).step == s for j, s in steps.items())
    assert nothing_left() == ([], [])


def test_schedule_command_on_ray(ray_cluster, tmp_path: Path, capsys) -> None:
    import json

    from heteroplan.cli import main

    code = main(["schedule", "--ray", "auto", "--policy", "sia", "--jobs", "2", "--interarrival", "1",
                 "--work", "2,3", "--round", "4", "--emulate", "A100=0.01,V100=0.02", "--overhead", "0.05",
                 "--batch", "8", "--out", str(tmp_path), "--json"])
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    assert all(r["finish_time"] is not None for r in printed["jobs"])
    rounds = [json.loads(line) for line in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    types = {t for r in rounds for t, _ in r["allocations"].values()}
    assert types <= {"A100", "V100"} and types  # Sia placed them on the Ray cluster's GPU types
    assert nothing_left() == ([], [])


def test_a_pipeline_over_both_gpu_types_trains_exactly(ray_cluster, tmp_path: Path) -> None:
    """Any plan the runtime trains: PP 2 (blocks on the A100 node, the head on the V100 node) x DP 2
    with uneven microbatch counts, one launch across both nodes, the parameters of one process."""
    from heteroplan.planner.plan import Plan, ReplicaGroup, Stage
    from heteroplan.policies.base import Allocation

    task = TinyGPTTask(n_layers=2, dtype="float64")
    stages = (Stage(0, 2, (ReplicaGroup("A100", "default", 1, 2),)), Stage(2, 4, (ReplicaGroup("V100", "default", 1, 2),)))
    plan = Plan("pp", 8, 2, stages, (3, 1))
    backend = RayBackend()
    nodes = {n.gpu_type: n.name for n in backend.cluster().nodes if n.gpu_type in ("A100", "V100")}
    alloc = Allocation.spanning(("A100", "V100"), ((nodes["V100"], 2), (nodes["A100"], 2)))
    handle = backend.launch("pp", plan, alloc, task, replace(CONFIG, steps=6, checkpoint_dir=str(tmp_path)))
    result = handle.wait()
    assert result.final_step == 6
    ids = backend.read().node_ids
    assert [p.node_id for p in handle.placements] == [ids[nodes[r.gpu_type]] for r in rank_layout(plan)]
    model, _ = train_reference(task, 8, RunConfig(steps=6, lr=0.05, momentum=0.9))
    state = latest_checkpoint(tmp_path).model_state()
    assert max(float((state[k] - v).abs().max()) for k, v in model.state_dict().items()) < 1e-9
    assert nothing_left() == ([], [])

"""CUDA graphs in the runtime (``RunConfig.cuda_graphs``): what can be checked without a GPU.

Which plans a graph can replay, and the errors for the rest, before anything is launched; the
graphed runs themselves are checked against eager ones in ``test_runtime_cuda.py`` (GPU only).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the runtime tests need torch: pip install torch==2.13.0 (CPU wheel: --index-url https://download.pytorch.org/whl/cpu)")

from heteroplan.errors import InputError  # noqa: E402
from heteroplan.planner.plan import Plan, Recomputation, ReplicaGroup, Stage  # noqa: E402
from heteroplan.runtime import RunConfig, TinyGPTTask, run_plan  # noqa: E402
from heteroplan.runtime.graphs import check_cuda_graphs, check_graphed_layers  # noqa: E402
from heteroplan.runtime.profiler import graphed_microbatch_seconds, profile_layers  # noqa: E402
from heteroplan.runtime.worker import pipeline_choice  # noqa: E402

GRAPHS = RunConfig(device="cuda", cuda_graphs=True)


def one_stage(replicas: int = 2, recompute: str = "none", sharding: str = "none", tp: int = 1) -> Plan:
    return Plan("t", 8, 2, (Stage(0, 4, (ReplicaGroup("cuda", "local", tp, replicas),), recompute, sharding),))


def test_graphs_replay_one_stage_plans_on_heteroplans_loop() -> None:
    """A one-stage data-parallel plan runs heteroplan's loop with graphs (torch's pipelining
    without), each replica 1F1B's order: a forward and its backward per microbatch."""
    plan = one_stage()
    check_cuda_graphs(plan, GRAPHS)
    choice = pipeline_choice(plan, GRAPHS)
    assert choice.engine == "heteroplan" and choice.schedules == ("1f1b", "1f1b") and "CUDA graphs" in choice.reason
    assert pipeline_choice(plan, RunConfig(device="cuda")).engine == "torch"


@pytest.mark.parametrize("plan,config,field,words", [
    (Plan("t", 8, 2, (Stage(0, 2, (ReplicaGroup("cuda", "local"),)), Stage(2, 4, (ReplicaGroup("cuda", "local"),)))),
     GRAPHS, "config.cuda_graphs", "2 stages"),
    (one_stage(tp=2), GRAPHS, "config.cuda_graphs", "tp=1"),
    (one_stage(sharding="zero1"), GRAPHS, "config.cuda_graphs", "optimizer_sharding"),
    (one_stage(), RunConfig(device="cuda", cuda_graphs=True, pipeline="torch"), "config.pipeline", "own loop"),
    (one_stage(), RunConfig(device="cuda", cuda_graphs=True, schedule="gpipe"), "config.schedule", "1f1b"),
])
def test_plans_a_graph_cannot_replay_are_refused_naming_the_field(plan, config, field, words) -> None:
    with pytest.raises(InputError) as err:
        check_cuda_graphs(plan, config)
    assert err.value.field == field and words in str(err.value)
    with pytest.raises(InputError):  # and before anything is launched
        run_plan(plan, TinyGPTTask(n_layers=2), config)


def test_graphs_need_a_cuda_device() -> None:
    with pytest.raises(InputError, match="config.cuda_graphs"):
        RunConfig(cuda_graphs=True)
    with pytest.raises(InputError, match="config.cuda_graphs"):
        RunConfig(device="cuda", cuda_graphs="yes")
    task = TinyGPTTask(n_layers=1)
    with pytest.raises(InputError, match="cuda_graphs"):
        profile_layers(task.build_model(), lambda m: task.batch(0, 0, m)[0], (1,), cuda_graphs=True)
    with pytest.raises(InputError, match="x='cpu'"):
        graphed_microbatch_seconds(task.build_model(), task.batch(0, 0, 1)[0], "fp32", None)
    check_cuda_graphs(Plan("t", 8, 2, (Stage(0, 2, (ReplicaGroup("cuda", "local"),)), Stage(2, 4, (ReplicaGroup("cuda", "local"),)))),
                      RunConfig(device="cuda"))  # no graphs asked for: nothing to check


def test_a_recomputing_stage_with_dropout_is_not_captured() -> None:
    """Under capture a checkpoint cannot restore the RNG state, so a recomputing stage is captured
    only where its layers draw no random numbers: dropout with p > 0 in training mode is refused
    (naming the layer); p = 0, eval mode, or no recomputation are fine."""
    from torch import nn

    layers = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), nn.Dropout(0.1)))
    with pytest.raises(InputError, match=r"'1\.1'.*Dropout\(p=0\.1\)"):
        check_graphed_layers(layers, Recomputation.FULL)
    check_graphed_layers(layers, Recomputation.NONE)
    check_graphed_layers(layers.eval(), Recomputation.FULL)
    check_graphed_layers(nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.0)), Recomputation.FULL)
    check_cuda_graphs(one_stage(recompute="full"), GRAPHS)  # the plan itself is fine

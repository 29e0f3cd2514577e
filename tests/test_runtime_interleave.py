"""Plans timed together in turns (measure_interleaved): each plan's times are its own, nothing hangs."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch", reason="the runtime tests need torch: pip install torch==2.13.0 (CPU wheel: --index-url https://download.pytorch.org/whl/cpu)")

from torch import nn  # noqa: E402

from heteroplan.errors import InputError, RankFailure  # noqa: E402
from heteroplan.planner.plan import Plan, ReplicaGroup, Stage  # noqa: E402
from heteroplan.runtime import RunConfig, SequentialTask, TinyGPTTask  # noqa: E402
from heteroplan.runtime.interleave import measure_interleaved, median_times, visit_order  # noqa: E402

SLEEP_S = 0.01  # per forward call of the sleeping layer (one per microbatch)


class SleepPerCall(nn.Module):
    """Scales its input by a weight and sleeps ``seconds`` per forward call (per microbatch)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.weight = nn.Parameter(torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.seconds)
        return x * self.weight


class Broken(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("this layer always fails")


def sleepy_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), SleepPerCall(SLEEP_S))


def broken_model() -> nn.Sequential:
    return nn.Sequential(nn.Linear(4, 4), Broken())


def batch(step: int, start: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + start)
    return torch.randn(count, 4, generator=g), torch.randn(count, 4, generator=g)


def mse(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((out - target) ** 2).mean()


def _plan(mbs: int, dp: int = 1, pp: int = 1) -> Plan:
    group = ReplicaGroup("cpu", "local", 1, dp)
    stages = (Stage(0, 2, (group,)),) if pp == 1 else (Stage(0, 1, (group,)), Stage(1, 2, (group,)))
    return Plan("sleepy", 8, mbs, stages)


def test_visit_order_visits_every_plan_once_per_round() -> None:
    order = visit_order(5, rounds=4, warmup_rounds=2, seed=3)
    assert len(order) == 6 * 5
    for r in range(6):
        visits = order[5 * r : 5 * r + 5]
        assert sorted(i for i, _ in visits) == list(range(5))
        assert all(timed == (r >= 2) for _, timed in visits)
    assert order == visit_order(5, rounds=4, warmup_rounds=2, seed=3)
    assert len({tuple(i for i, _ in order[5 * r : 5 * r + 5]) for r in range(6)}) > 1  # orders differ by round
    assert median_times({"a": [3.0, 1.0, 2.0], "b": [4.0, 1.0]}) == {"a": 2.0, "b": 2.5}


def test_each_plan_gets_its_own_times() -> None:
    """Forward calls sleep 10 ms each: 8 microbatches (mbs 1), 2 (mbs 4), 1 per replica (DP 2 x mbs 4),
    and a 2-stage pipeline at mbs 2 (the sleeping layer on stage 2) 4 x 10 ms."""
    task = SequentialTask(sleepy_model, batch, mse)
    plans = {"mbs 1": _plan(1), "mbs 4": _plan(4), "DP 2, mbs 4": _plan(4, dp=2), "PP 2, mbs 2": _plan(2, pp=2)}
    lines: list[str] = []
    times = measure_interleaved(plans, task, rounds=3, iterations=2, progress=lines.append)
    assert {n: len(t) for n, t in times.items()} == {n: 6 for n in plans}
    assert len(lines) == 3 and lines[-1].startswith("round 3/3")
    # Sleeps on each plan's critical path. ``time.sleep`` never returns early, so every timed
    # iteration of a plan lasts at least its sleeps, however loaded the machine: only a lower bound
    # is asserted (no timing-dependent upper bound). Times credited to the wrong plan break it: the
    # 1- and 2-sleep plans' iterations are far shorter than the 8-sleep plan's 80 ms.
    low = {"mbs 1": 8, "mbs 4": 2, "DP 2, mbs 4": 1, "PP 2, mbs 2": 4}
    for name, samples in times.items():
        assert min(samples) >= low[name] * SLEEP_S, (name, samples)


def test_a_failing_plan_stops_the_measurement_with_its_error() -> None:
    task = SequentialTask(broken_model, batch, mse)
    with pytest.raises(RankFailure, match="this layer always fails"):
        measure_interleaved({"broken": _plan(4)}, task, rounds=1, config=RunConfig(timeout_s=20))


def test_bad_input_names_the_field() -> None:
    task = SequentialTask(sleepy_model, batch, mse)
    for kwargs, field in (({"rounds": 0}, "rounds"), ({"iterations": 0}, "iterations"), ({"warmup": -1}, "warmup")):
        with pytest.raises(InputError) as info:
            measure_interleaved({"a": _plan(4)}, task, **kwargs)
        assert info.value.field == field
    with pytest.raises(InputError) as info:
        measure_interleaved({}, task)
    assert info.value.field == "plans"
    with pytest.raises(InputError) as info:
        measure_interleaved({"a": _plan(4)}, object())
    assert info.value.field == "task"
    with pytest.raises(InputError) as info:  # the tiny GPT has 4 layers, the plan covers 2
        measure_interleaved({"a": _plan(4)}, TinyGPTTask(n_layers=2))
    assert info.value.field == "plans['a'].stages"
    for pipelines, field in (({"b": "torch"}, "pipelines"), ({"a": "deepspeed"}, "config.pipeline")):
        with pytest.raises(InputError) as info:
            measure_interleaved({"a": _plan(4)}, task, pipelines=pipelines)
        assert info.value.field == field

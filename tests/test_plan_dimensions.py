"""Plan files carry precision, recomputation and optimizer-state sharding; old files keep loading."""

from __future__ import annotations

import json

import pytest

from heteroplan.errors import InputError
from heteroplan.planner.plan import (
    OptimizerSharding,
    Plan,
    Precision,
    Recomputation,
    ReplicaGroup,
    Stage,
)

GROUP = (ReplicaGroup("A100-40", "z", 1, 2),)


def test_defaults_are_todays_behaviour_and_are_not_written() -> None:
    plan = Plan("m", 8, 2, (Stage(0, 2, GROUP), Stage(2, 4, GROUP)))
    assert plan.precision is Precision.FP32
    assert all(s.recompute is Recomputation.NONE and s.optimizer_sharding is OptimizerSharding.NONE for s in plan.stages)
    data = json.loads(plan.to_json())
    assert "precision" not in data and all(set(s) == {"layers", "replicas"} for s in data["stages"])
    # a file written before these fields existed reads as the same plan
    old = {"model": "m", "global_batch_size": 8, "microbatch_size": 2, "microbatches_per_replica": None,
           "stages": [{"first_layer": 0, "last_layer": 2, "replicas": [{"gpu_type": "A100-40", "zone": "z", "tp": 1, "count": 2}]},
                      {"first_layer": 2, "last_layer": 4, "replicas": [{"gpu_type": "A100-40", "zone": "z", "tp": 1, "count": 2}]}]}
    assert Plan.from_dict(old) == plan


def test_dimensions_round_trip_and_show_in_describe(tmp_path) -> None:
    plan = Plan("m", 8, 2, (Stage(0, 2, GROUP, "full", "zero1"), Stage(2, 4, GROUP)), precision="bf16")
    assert plan.stages[0].recompute is Recomputation.FULL and plan.stages[0].optimizer_sharding is OptimizerSharding.ZERO1
    data = json.loads(plan.to_json(tmp_path / "p.json"))
    assert data["precision"] == "bf16" and data["stages"][0]["recompute"] == "full"
    assert "recompute" not in data["stages"][1]
    assert Plan.from_json(tmp_path / "p.json") == plan
    text = plan.describe()
    assert "bf16" in text.splitlines()[0] and "recompute full, optimizer state zero1" in text.splitlines()[1]
    assert "recompute" not in text.splitlines()[2]


@pytest.mark.parametrize(("where", "kwargs"), [
    ("plan.precision", {"precision": "fp16"}),
    ("stage.recompute", {"recompute": "selective"}),
    ("stage.optimizer_sharding", {"optimizer_sharding": "zero9"}),
])
def test_unknown_dimension_values_name_the_field(where: str, kwargs: dict) -> None:
    stage_kwargs = {k: v for k, v in kwargs.items() if k != "precision"}
    with pytest.raises(InputError, match=where):
        Plan("m", 8, 2, (Stage(0, 2, GROUP, **stage_kwargs),), precision=kwargs.get("precision", "fp32"))

"""Plan files: version 2 writes layer ranges the way describe() prints them; version-1 files
(exclusive last_layer, no format_version) still read to the same plan."""

from __future__ import annotations

import json

import pytest

from heteroplan.errors import InputError
from heteroplan.planner.plan import Plan, ReplicaGroup, Stage

# A version-1 file as heteroplan wrote it before format versions: last_layer excluded.
OLD = {"model": "OPT-350", "global_batch_size": 32, "microbatch_size": 2,
       "stages": [{"first_layer": 0, "last_layer": 10, "replicas": [{"gpu_type": "A100-40", "zone": "z", "tp": 1,
                                                                     "count": 2}]},
                  {"first_layer": 10, "last_layer": 26, "replicas": [{"gpu_type": "V100-16", "zone": "z", "tp": 2,
                                                                      "count": 2}]}],
       "microbatches_per_replica": None}


def test_plan_file_layers_read_as_describe_prints_them(tmp_path) -> None:
    plan = Plan.from_dict(OLD)
    data = json.loads(plan.to_json(tmp_path / "plan.json"))
    assert data["format_version"] == 2
    assert [s["layers"] for s in data["stages"]] == [[0, 9], [10, 25]]
    assert all("last_layer" not in s for s in data["stages"])
    printed = plan.describe()
    assert "layers 0-9" in printed and "layers 10-25" in printed
    assert Plan.from_json(tmp_path / "plan.json") == plan


def test_old_format_files_still_read(tmp_path) -> None:
    path = tmp_path / "old.json"
    path.write_text(json.dumps(OLD))
    plan = Plan.from_json(path)
    assert [(s.first_layer, s.last_layer) for s in plan.stages] == [(0, 10), (10, 26)]
    assert plan.num_layers == 26
    assert Plan.from_dict({**OLD, "format_version": 1}) == plan


def test_a_one_layer_stage_round_trips() -> None:
    plan = Plan("m", 4, 1, (Stage(0, 1, (ReplicaGroup("a", "z"),)), Stage(1, 3, (ReplicaGroup("a", "z"),))))
    data = plan.to_dict()
    assert [s["layers"] for s in data["stages"]] == [[0, 0], [1, 2]]
    assert Plan.from_dict(json.loads(json.dumps(data))) == plan


@pytest.mark.parametrize(("change", "field"), [
    ({"format_version": 3}, "format_version"),
    ({"format_version": True}, "format_version"),
    ({"stages": [{"layers": [0], "replicas": []}]}, "layers"),
    ({"stages": [{"layers": [5, 2], "replicas": [{"gpu_type": "a", "zone": "z"}]}]}, "layers"),
    ({"stages": [{"layers": [0, 2.5], "replicas": [{"gpu_type": "a", "zone": "z"}]}]}, "layers"),
    ({"stages": [{"first_layer": 0, "last_layer": 4, "replicas": [{"gpu_type": "a", "zone": "z"}]}]}, "stages"),
])
def test_bad_version_2_files_name_the_field(change, field) -> None:
    data = {**Plan.from_dict(OLD).to_dict(), **change}
    with pytest.raises(InputError, match=field):
        Plan.from_dict(data)

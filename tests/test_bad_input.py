"""The bad-input audit of issue 17: each finding is refused where the input enters, with an
error naming the field and the value (exit code 2 on the command line), never a traceback
from deep inside, a silent reinterpretation or a sibling file."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from heteroplan.cluster import Cluster, GPUType
from heteroplan.errors import InputError, ModelError
from heteroplan.milp import Model
from heteroplan.planner.plan import Plan
from heteroplan.policies.base import Allocation, AllocationError, check_allocations
from heteroplan.workload.sia import read_sia_workload

PLAN = {"model": "m", "global_batch_size": 8, "microbatch_size": 1,
        "stages": [{"first_layer": 0, "last_layer": 4, "replicas": [{"gpu_type": "a", "zone": "z", "tp": 1}]}]}
HEADER = "name,time,application,num_replicas,batch_size\n"


# ------------------------------------------------------------------ command-line flags
@pytest.mark.parametrize(("argv", "flag"), [
    (["simulate", "--jobs", "0"], "--jobs"),
    (["simulate", "--jobs", "-3"], "--jobs"),
    (["simulate", "--round", "inf"], "--round"),
    (["simulate", "--round", "nan"], "--round"),
    (["simulate", "--round", "0"], "--round"),
    (["simulate", "--max-hours", "-1"], "--max-hours"),
    (["demo", "--jobs", "0"], "--jobs"),
    (["hadar", "--jobs", "0"], "--jobs"),
    (["hadar", "--rate", "-1"], "--rate"),
    (["plan", "--model", "OPT-350", "--gbs", "64", "--gpus", "A100-40=8", "--max-pp", "0"], "--max-pp"),
    (["plan", "--model", "OPT-350", "--gbs", "0", "--gpus", "A100-40=8"], "--gbs"),
    (["plan", "--model", "OPT-350", "--gbs", "64", "--gpus", "A100-40=8", "--budget", "inf"], "--budget"),
    (["goodput", "cifar10", "--progress", "2"], "--progress"),
    (["goodput", "cifar10", "--gpus", "1,0"], "--gpus"),
    (["run", "--layers", "0"], "--layers"),
    (["run", "--steps", "0"], "--steps"),
])
def test_out_of_range_flags_are_refused(argv: list[str], flag: str, cli_error) -> None:
    assert flag in cli_error(argv)


def _value_flags() -> list[tuple[str, str]]:
    """(command, flag) of every flag and positional of every subcommand that takes a free value
    (not a switch, not a fixed choice), read from the parser itself: new ones are covered too."""
    import argparse

    from heteroplan.cli import build_parser

    out = []
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for command, parser in sub.choices.items():
        for action in parser._actions:
            if action.nargs == 0 or action.choices is not None or action.dest == "help":
                continue
            out.append((command, action.option_strings[0] if action.option_strings else action.dest))
    return out


@pytest.mark.parametrize(("command", "flag"), _value_flags())
@pytest.mark.parametrize("empty", ["", "  "], ids=["empty", "blank"])
def test_an_empty_value_is_refused_by_the_flag_not_taken_as_left_out(command, flag, empty, tmp_path, cli_error) -> None:
    """``--out "$DIR"`` with ``DIR`` unset: before, ``plan --out ''`` wrote nothing, ``run --plan ''``
    trained a generated plan, ``simulate --out ''`` kept no results, all with exit code 0. The
    other required arguments are given (a sweep file that does not exist, a profile's ``--out``)."""
    required = {"sweep": [str(tmp_path / "none.toml")], "profile": ["--out", str(tmp_path / "data")]}
    argv = [command, flag, empty] if flag.startswith("-") else [command, empty]
    others = required.get(command, [])
    err = cli_error(argv + ([] if flag in others or flag == "sweep" else others))
    if "runtime='torch'" in err:  # the command checks this flag after finding the runtime
        pytest.skip(f"{command} {flag} is checked once the runtime is there: it needs torch")
    assert f"argument {flag}: " in err or f"{flag}={empty!r}" in err
    assert not (tmp_path / "data").exists()


def test_budget_with_cost_objective_is_an_error(cli_error) -> None:
    err = cli_error(["plan", "--model", "OPT-350", "--gbs", "64", "--gpus", "A100-40=8",
                     "--objective", "cost", "--budget", "5"])
    assert "--budget" in err and "throughput" in err


def test_a_global_batch_no_plan_file_holds_is_refused(cli_error) -> None:
    err = cli_error(["plan", "--model", "OPT-350", "--gbs", "1" + "0" * 23, "--gpus", "A100-40=8"])
    assert "--gbs" in err and "100000000" in err


def test_gpu_count_must_be_positive(cli_error) -> None:
    err = cli_error(["plan", "--model", "OPT-350", "--gbs", "64", "--gpus", "A100-40=0"])
    assert "--gpus" in err


def test_out_that_is_a_file_or_unwritable_is_refused_before_the_run(tmp_path, cli_error) -> None:
    afile = tmp_path / "file"
    afile.write_text("x")
    assert "is a file" in cli_error(["simulate", "--jobs", "2", "--out", str(afile)])
    assert "cannot write" in cli_error(["simulate", "--jobs", "2", "--out", str(afile / "sub")])


# ------------------------------------------------------------------ workload CSV
def write_csv(tmp_path, rows: str, data: bytes | None = None):
    path = tmp_path / "w.csv"
    path.write_bytes(data if data is not None else (HEADER + rows).encode())
    return path


def test_repeated_job_names_stay_unique(tmp_path) -> None:
    path = write_csv(tmp_path, "j,0,cifar10,1,128\nj,1,cifar10,1,128\nj#1,2,cifar10,1,128\n")
    names = [j.name for j in read_sia_workload(path)]
    assert len(set(names)) == 3 and "j" in names and "j#1" in names


@pytest.mark.parametrize(("row", "column"), [
    ("j,inf,cifar10,1,128", "time"),
    ("j,nan,cifar10,1,128", "time"),
    ("j,0,cifar10,nan,128", "num_replicas"),
    ("j,0,cifar10,1,1e12", "batch_size"),
    ("j,0,cifar10,inf,128", "num_replicas"),
])
def test_workload_rows_that_would_break_a_run_are_refused(tmp_path, row: str, column: str) -> None:
    with pytest.raises(InputError, match=column):
        read_sia_workload(write_csv(tmp_path, row + "\n"))


def test_batch_size_beyond_the_application_limit_is_refused_by_simulate(tmp_path, cli_error) -> None:
    path = write_csv(tmp_path, "j,0,cifar10,1,100000\n")  # cifar10 takes at most 4096 samples
    assert "batch_size" in cli_error(["simulate", "--workload", str(path), "--policy", "fifo"])


def test_non_utf8_files_are_input_errors(tmp_path, cli_error) -> None:
    csv = write_csv(tmp_path, "", data=HEADER.encode() + b"j\xff,0,cifar10,1,128\n")
    assert "UTF-8" in cli_error(["simulate", "--workload", str(csv), "--policy", "fifo"])
    cluster = tmp_path / "c.json"
    cluster.write_bytes(b'{"name": "\xff"}')
    assert "UTF-8" in cli_error(["clusters", str(cluster)])
    plan = tmp_path / "p.json"
    plan.write_bytes(b'{"model": "\xfe"}')
    with pytest.raises(InputError, match="UTF-8"):
        Plan.from_json(plan)


# ------------------------------------------------------------------ clusters
TYPES = [{"name": "a", "memory_gb": 16, "gpus_per_node": 4}]


@pytest.mark.parametrize("count", [math.nan, math.inf, -1, 2.5, True])
def test_bad_gpu_counts_are_cluster_errors(count) -> None:
    with pytest.raises(InputError, match="counts"):
        Cluster.from_dict({"gpu_types": TYPES, "counts": {"a": count}})


def test_same_gpu_type_twice_in_counts_is_an_error(tmp_path) -> None:
    with pytest.raises(InputError, match="same GPU type"):
        Cluster.from_dict({"gpu_types": TYPES, "counts": {"a": 4, "a@default": 8}})
    path = tmp_path / "c.json"
    path.write_text('{"gpu_types": [{"name": "a", "memory_gb": 16, "gpus_per_node": 4}], '
                    '"counts": {"a": 4, "a": 8}}')
    with pytest.raises(InputError, match="twice"):
        Cluster.from_json(path)


# ------------------------------------------------------------------ plans
@pytest.mark.parametrize(("path", "value", "field"), [
    (("global_batch_size",), 8.9, "global_batch_size"),
    (("stages", 0, "last_layer"), 4.5, "last_layer"),
    (("stages", 0, "replicas", 0, "tp"), True, "tp"),
    (("stages", 0, "replicas", 0, "count"), "2", "count"),
])
def test_plan_numbers_are_taken_as_written(path, value, field) -> None:
    data = json.loads(json.dumps(PLAN))
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(InputError, match=field):
        Plan.from_dict(data)
    data = json.loads(json.dumps(PLAN))
    data["global_batch_size"] = 8.0  # a whole number written as a float is fine
    assert Plan.from_dict(data).global_batch_size == 8


def test_plan_to_json_creates_missing_directories(tmp_path) -> None:
    path = tmp_path / "new" / "dir" / "plan.json"
    Plan.from_dict(PLAN).to_json(path)
    assert Plan.from_json(path) == Plan.from_dict(PLAN)


# ------------------------------------------------------------------ policies
def test_negative_gpu_count_in_a_placement_is_refused() -> None:
    cluster = Cluster.from_counts([GPUType("a", 16, 4)], {"a": 4})
    node = cluster.nodes[0].name
    bad = {"j": Allocation("a", 1, ((node, 3), (node, -2)))}
    with pytest.raises(AllocationError, match="placement"):
        check_allocations(cluster, bad, ["j"])


def test_pollux_on_an_empty_cluster_allocates_nothing() -> None:
    from heteroplan.policies.pollux import PolluxPolicy
    from heteroplan.sim.compare import compare_policies
    from heteroplan.workload.sia import bundled_workload

    for empty in (Cluster((), (), name="empty"), Cluster((GPUType("aws", 16, 4),), (), name="no-nodes")):
        (result,) = compare_policies(bundled_workload()[:2], empty, [PolluxPolicy()], progress=False, max_time=3600)
        assert result.error is None and result.summary()["finished"] == 0


# ------------------------------------------------------------------ solver models
def small_model(coefficient: float = 1.0) -> Model:
    m = Model("small")
    x = m.add_variables("x", 3, ub=10, integer=True)
    m.add_constraints(x * coefficient <= 5, "cap")
    m.maximize(x.sum())
    return m


def test_warm_start_of_the_wrong_shape_is_a_model_error() -> None:
    from heteroplan.solvers import solve

    with pytest.raises(ModelError, match="x"):
        solve(small_model(), warm_start={"x": np.ones(5)})


@pytest.mark.parametrize("coefficient", [1e300, 1e16])
def test_coefficients_highs_cannot_take_are_model_errors(coefficient: float) -> None:
    from heteroplan.solvers import solve

    with pytest.raises(ModelError, match="coefficient"):
        solve(small_model(coefficient))


def test_write_lp_and_mps_into_a_directory_write_inside_it(tmp_path) -> None:
    from heteroplan.solvers import write_lp, write_mps

    target = tmp_path / "models"
    target.mkdir()
    lp, mps = write_lp(small_model(), target), write_mps(small_model(), target)
    assert lp == target / "small.lp" and mps == target / "small.mps"
    assert "cap(2): +1 x(2) <= +5" in lp.read_text()  # the model (with its names), not an empty file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models"]  # no sibling models.lp

"""``heteroplan schedule`` on local processes: records written as it goes, each job trained to its steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the runtime tests need torch: pip install torch==2.13.0")

from heteroplan.cli import main  # noqa: E402
from heteroplan.runtime import latest_checkpoint  # noqa: E402

ARGS = ["schedule", "--policy", "fifo", "--cluster", "A100=2,V100=1", "--jobs", "3", "--interarrival", "1",
        "--work", "2,4", "--round", "3", "--restart-delay", "2", "--emulate", "A100=0.01,V100=0.02",
        "--overhead", "0.05", "--batch", "8"]


def test_schedule_runs_every_job_to_its_steps_and_keeps_records(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert main([*ARGS, "--out", str(out), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    jobs = {r["job_id"]: r for r in printed["jobs"]}
    assert set(jobs) == {"job-0", "job-1", "job-2"}
    assert json.loads((out / "jobs.json").read_text()) == printed["jobs"]
    for jid, record in jobs.items():
        assert record["finish_time"] is not None and record["failures"] == 0
        assert record["jct_s"] if "jct_s" in record else record["finish_time"] >= record["arrival_time"]
        assert latest_checkpoint(out / "jobs" / jid).step == record["steps_done"] > 0  # trained to the end
    rounds = [json.loads(line) for line in (out / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds] == list(range(len(rounds)))
    starts = [e for r in rounds for e in r["events"] if e["kind"] == "start"]
    assert len(starts) == len(printed["latencies"]) == sum(1 + r["restarts"] for r in jobs.values())
    finished = {e["job"] for r in rounds for e in r["events"] if e["kind"] == "finish"}
    assert finished == set(jobs)
    # FIFO on 3 GPUs: never more GPUs in a round than the cluster has
    assert all(sum(n for _, n in r["allocations"].values()) <= 3 for r in rounds)


@pytest.mark.parametrize(("flag", "value"), [("--emulate", "A100=fast"), ("--cluster", "A100"),
                                             ("--work", "5,1"), ("--policy", "no-such-policy"),
                                             ("--type-label", "A100"), ("--requested-gpus", "5")])
def test_schedule_refuses_bad_input_naming_the_flag(cli_error, tmp_path: Path, flag: str, value: str) -> None:
    err = cli_error([*ARGS, "--out", str(tmp_path), flag, value])
    assert value in err or flag.lstrip("-") in err


def test_schedule_on_ray_without_ray_names_the_extra(cli_error, tmp_path: Path, monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    err = cli_error([*ARGS, "--out", str(tmp_path), "--ray", "auto"])
    assert "heteroplan[ray]" in err


def test_emulated_steps_last_their_gpu_types_time_and_the_model_says_so() -> None:
    from heteroplan.runtime import RunConfig, TinyGPTTask, run_plan
    from heteroplan.runtime.config import StepEmulation
    from heteroplan.runtime.emulated import EmulatedWorkload, emulated_goodput
    from heteroplan.runtime.rounds import data_parallel_plan

    emulation = StepEmulation({"A100": 0.01, "V100": 0.03}, overhead_s=0.02)
    task = TinyGPTTask(n_layers=1)
    plan = data_parallel_plan("e", 6, 2, task.num_layers, "V100")  # 3 samples a replica
    result = run_plan(plan, task, RunConfig(steps=3, emulate=emulation))
    assert all(t >= 0.02 + 3 * 0.03 for t in result.iteration_times)  # padded: a lower bound, not a timing
    workload = EmulatedWorkload(emulation, (0.0,), (10,), sync_s=0.005, batch_size=8)
    model = emulated_goodput(workload)
    for gpu_type, per_sample in (("A100", 0.01), ("V100", 0.03)):
        assert float(model.goodput(gpu_type, 1, 1)) == pytest.approx(8 / (0.02 + 8 * per_sample))
        assert float(model.goodput(gpu_type, 1, 4)) == pytest.approx(8 / (0.02 + 2 * per_sample + 0.005))
    with pytest.raises(Exception, match="seconds_per_sample"):
        StepEmulation({"A100": -1.0})


def test_schedule_json_and_its_files_are_strict_json(tmp_path: Path, capsys) -> None:
    """A job's ``isolated_time`` is infinite until known: ``--json`` and ``jobs.json`` wrote it as
    ``Infinity``, which is no JSON (``jq`` and heteroplan's own ``read_json`` refuse it); now ``null``."""
    from heteroplan.inputs import read_json

    out = tmp_path / "out"
    assert main(["schedule", "--policy", "fifo", "--cluster", "A100=1", "--jobs", "1", "--work", "1,1",
                 "--round", "2", "--emulate", "A100=0.01", "--overhead", "0.05", "--batch", "4",
                 "--out", str(out), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out, parse_constant=lambda name: pytest.fail(f"{name} in --json"))
    assert printed["jobs"][0]["isolated_time"] is None
    assert read_json(out / "jobs.json") == printed["jobs"] and read_json(out / "latencies.json") == printed["latencies"]


def test_schedule_runs_each_job_on_its_requested_gang_under_a_rigid_policy(tmp_path: Path, capsys) -> None:
    """``--requested-gpus 2`` under FIFO: every allocation of a job is its gang of 2 (it was 1 whatever
    the job: the executor submitted one requested GPU)."""
    out = tmp_path / "out"
    assert main(["schedule", "--policy", "fifo", "--cluster", "A100=2", "--jobs", "2", "--interarrival", "1",
                 "--work", "1,2", "--round", "3", "--restart-delay", "1", "--emulate", "A100=0.01",
                 "--overhead", "0.05", "--batch", "8", "--requested-gpus", "2", "--out", str(out), "--json"]) == 0
    jobs = json.loads(capsys.readouterr().out)["jobs"]
    assert all(r["finish_time"] is not None for r in jobs)
    rounds = [json.loads(line) for line in (out / "rounds.jsonl").read_text().splitlines()]
    gangs = {n for r in rounds for _, n in r["allocations"].values()}
    assert gangs == {2}

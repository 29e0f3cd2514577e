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
                                             ("--type-label", "A100")])
def test_schedule_refuses_bad_input_naming_the_flag(cli_error, tmp_path: Path, flag: str, value: str) -> None:
    err = cli_error([*ARGS, "--out", str(tmp_path), flag, value])
    assert value in err or flag.lstrip("-") in err

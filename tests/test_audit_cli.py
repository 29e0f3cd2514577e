"""Audit (issue 36): results are never lost or left inconsistent (signals, reruns, a full disk,
symlinks), runs are bounded (processes, rounds, cluster size), and nothing is silent (rejected
jobs, empty clusters, utilisation above 1, policy options that would fail every round)."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from heteroplan.atomic_json import write_json_atomic
from heteroplan.cli import main
from heteroplan.cluster import MAX_CLUSTER_GPUS, Cluster
from heteroplan.errors import ClusterError, InputError
from heteroplan.signals import Interrupted, SignalGuard
from heteroplan.sim.metrics import JobRecord, SimResult

ROOT = Path(__file__).resolve().parent.parent
HEADER = "name,time,application,num_replicas,batch_size\n"


def exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code)


# ------------------------------------------------------------------ writes
def test_a_symlinked_output_is_written_through(tmp_path) -> None:
    target = tmp_path / "real.json"
    target.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_json_atomic(link, {"a": 1})
    assert link.is_symlink() and json.loads(target.read_text()) == {"a": 1}


def test_a_full_disk_leaves_no_temporary_file_and_a_clear_error(tmp_path, monkeypatch) -> None:
    (tmp_path / "old.json").write_text('{"kept": true}')

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(InputError, match="No space left"):
        write_json_atomic(tmp_path / "old.json", {"new": 1})
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.json"]
    assert json.loads((tmp_path / "old.json").read_text()) == {"kept": True}


def test_simulate_on_a_full_disk_exits_2_without_temporary_files(tmp_path, monkeypatch, capsys) -> None:
    real = Path.write_text

    def full(self, *args, **kwargs):
        if self.name.endswith(".tmp"):
            real(self, "partial")  # the disk filled up part way through
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full)
    assert exit_code(["simulate", "--jobs", "3", "--policy", "fifo", "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "No space left" in capsys.readouterr().err
    assert not list((tmp_path / "o").glob("*.tmp")) and not list((tmp_path / "o").glob(".*.tmp"))


def test_two_runs_into_one_out_keep_every_policy(tmp_path, capsys) -> None:
    out = str(tmp_path / "o")
    assert exit_code(["simulate", "--jobs", "3", "--policy", "fifo", "--out", out, "--quiet"]) == 0
    assert exit_code(["simulate", "--jobs", "3", "--policy", "tiresias", "--out", out, "--quiet"]) == 0
    results = json.loads((tmp_path / "o" / "results.json").read_text())
    assert sorted(results) == ["fifo", "tiresias"]
    assert sorted(json.loads((tmp_path / "o" / "run.json").read_text())["completed"]) == ["fifo", "tiresias"]
    # a run on other inputs would mix results of two workloads: refused before it runs
    assert exit_code(["simulate", "--jobs", "2", "--policy", "fifo", "--out", out, "--quiet"]) == 2
    assert "other inputs" in capsys.readouterr().err


# ------------------------------------------------------------------ signals
def test_a_second_signal_does_not_cut_the_cleanup_short() -> None:
    cleaned = False
    with SignalGuard() as guard:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the signal lands before this ends
        except Interrupted:
            os.kill(os.getpid(), signal.SIGINT)  # 20 ms later, while the results are written
            time.sleep(0.05)
            cleaned = True
    assert cleaned and guard.received == signal.SIGINT


def test_two_sigints_leave_run_json_consistent(tmp_path) -> None:
    out = tmp_path / "o"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "heteroplan.cli", "simulate", "--jobs", "200", "--policy", "fifo",
                             "--policy", "sia", "--out", str(out), "--quiet"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        while not (out / "fifo.json").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.poll() is None, "the run ended before it could be interrupted"
        proc.send_signal(signal.SIGINT)
        time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, proc.stderr.read().decode()[-2000:]
    run = json.loads((out / "run.json").read_text())
    assert run["interrupted"] == "SIGINT" and run["completed"] == ["fifo"] and run["pending"] == ["sia"]
    assert list(json.loads((out / "results.json").read_text())) == ["fifo"]


def test_hadar_json_keeps_finished_policies_on_sigterm(monkeypatch, capsys) -> None:
    import heteroplan.sim.loop as loop

    real = loop.simulate
    calls = []

    def terminated_at_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise Interrupted(signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "simulate", terminated_at_second)
    code = exit_code(["hadar", "--jobs", "4", "--policy", "yarn-cs", "--policy", "hadar", "--json"])
    captured = capsys.readouterr()
    assert code == 143
    assert list(json.loads(captured.out)) == ["yarn-cs"]  # one JSON document with what finished
    assert "SIGTERM" in captured.err


# ------------------------------------------------------------------ bounds
@pytest.mark.parametrize("argv", [["simulate", "--round", "0.001"], ["hadar", "--round", "0.001"]])
def test_rounds_too_short_to_ever_finish_are_refused(argv, capsys) -> None:
    assert exit_code(argv) == 2
    assert "--round" in capsys.readouterr().err


def test_a_cluster_of_1e8_gpus_is_refused_before_building_nodes() -> None:
    types = [{"name": "a", "memory_gb": 16, "gpus_per_node": 4}]
    t0 = time.process_time()
    with pytest.raises(ClusterError, match="at most"):
        Cluster.from_dict({"gpu_types": types, "counts": {"a": 100_000_000}})
    assert time.process_time() - t0 < 5  # refused by arithmetic, not after 25M node objects
    assert Cluster.from_dict({"gpu_types": types, "counts": {"a": MAX_CLUSTER_GPUS}}).num_gpus == MAX_CLUSTER_GPUS


@pytest.mark.parametrize("data", [{"counts": {"a": 0}}, {"nodes": []}])
def test_a_cluster_without_gpus_is_an_error(data) -> None:
    with pytest.raises(ClusterError, match="no GPUs"):
        Cluster.from_dict({"gpu_types": [{"name": "a", "memory_gb": 16, "gpus_per_node": 4}]} | data)


# ------------------------------------------------------------------ silent results
def test_a_job_larger_than_the_cluster_is_reported(tmp_path, capsys) -> None:
    path = tmp_path / "w.csv"
    path.write_text(HEADER + "big,0,cifar10,100000,128\nsmall,0,cifar10,1,128\n")
    out = tmp_path / "o"
    assert exit_code(["simulate", "--workload", str(path), "--policy", "fifo", "--out", str(out), "--quiet"]) == 0
    assert "big: needs 100000 GPUs" in capsys.readouterr().err
    assert json.loads((out / "results.json").read_text())["fifo"]["rejected"] == {
        "big": "needs 100000 GPUs together; only 64 GPUs of types it can run on"}


def record(name: str, arrival: float, finish: float | None, gpu_seconds: float) -> JobRecord:
    return JobRecord(name, "app", arrival, arrival, finish, 0, gpu_seconds, 1.0 if finish else 0.5, 100.0)


def test_utilisation_counts_the_time_unfinished_jobs_held_gpus() -> None:
    # 4 GPUs; a long job holds all 4 from t=0 to the end (3600 s) without finishing, a short
    # one arrives at 3000 s and finishes at 3600 s on nothing extra: 14,400 GPU-s in 4 x 3600
    jobs = (record("long", 0.0, None, 4 * 3600.0), record("short", 3000.0, 3600.0, 0.0))
    result = SimResult("p", "c", 60.0, {"a": 4}, jobs, end_time=3600.0)
    assert result.summary()["utilization"] == pytest.approx(1.0)  # was 6.0: the short job's 600 s alone
    done = (record("x", 0.0, 1800.0, 4 * 900.0),)
    assert SimResult("p", "c", 60.0, {"a": 4}, done, end_time=1800.0).summary()["utilization"] == pytest.approx(0.5)


@pytest.mark.parametrize(("options", "field"), [
    ({"mode": "bogus"}, "mode"), ({"time_limit": -1}, "time_limit"), ({"mip_gap": float("nan")}, "mip_gap"),
    ({"round_length": 0}, "round_length"),
])
def test_sia_options_are_checked_when_given(options, field) -> None:
    from heteroplan.policies.sia import SiaPolicy

    with pytest.raises(InputError, match=field):
        SiaPolicy(**options)


@pytest.mark.parametrize(("argv", "flag"), [
    (["hadar", "--jobs", "1000000000"], "--jobs"),
    (["profile", "--out", "x", "--seq", "1000000000"], "--seq"),
    (["profile", "--out", "x", "--repeats", "0"], "--repeats"),
    (["profile", "--out", "x", "--world-size", "1"], "--world-size"),
    (["run", "--width", "10000000"], "--width"),
    (["run", "--layers", "100000"], "--layers"),
    (["goodput", "cifar10", "--gpus", "100000000"], "--gpus"),
])
def test_sizes_that_would_exhaust_the_machine_are_refused(argv, flag, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert exit_code(argv) == 2
    assert flag in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_a_sweep_of_a_million_cells_is_refused() -> None:
    from heteroplan.sim.sweep import parse_sweep

    with pytest.raises(InputError, match="cells"):
        parse_sweep({"seeds": list(range(1_000_000)), "workloads": [{"bundled": "philly/workload-1"}],
                     "clusters": [{"preset": "sia-64"}], "policies": [{"name": "fifo"}]})


def test_plan_out_writes_through_a_symlink(tmp_path) -> None:
    target = tmp_path / "real.json"
    target.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    assert exit_code(["plan", "--model", "OPT-350", "--gbs", "64", "--gpus", "A100-40=8", "--out", str(link)]) == 0
    assert link.is_symlink()  # the link is kept, not replaced by a file
    assert json.loads(target.read_text())["global_batch_size"] == 64

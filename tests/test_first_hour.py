"""A new user's first hour (issue 17): quiet output, and results that survive an interrupt."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ENV = dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg")


def test_solving_prints_no_highs_banner_on_a_pipe() -> None:
    """HiGHS prints its banner from C on the first ``Highs()``; nothing may reach stdout."""
    code = ("from heteroplan.milp import Model\n"
            "from heteroplan.solvers import solve\n"
            "m = Model('t'); x = m.add_variables('x', 2, ub=3, integer=True)\n"
            "m.add_constraints(x.sum() <= 4, 'cap'); m.maximize(x.sum())\n"
            "print('objective', solve(m).objective)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "objective 4.0\n" and "HiGHS" not in proc.stderr


def test_demo_output_has_no_banner(capfd) -> None:
    from heteroplan.cli import main

    assert main(["demo", "--jobs", "3", "--policy", "sia", "--quiet"]) == 0
    out, err = capfd.readouterr()
    assert "avg_jct_h" in out and "HiGHS" not in out + err and "Copyright" not in out + err


def test_library_is_silent(capfd) -> None:
    from heteroplan.cluster import preset
    from heteroplan.sim.compare import compare_policies
    from heteroplan.workload.sia import bundled_workload

    compare_policies(bundled_workload()[:3], preset("sia-64"), ["sia", "fifo"], progress=False)
    assert capfd.readouterr() == ("", "")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_simulate_keeps_finished_policies_when_interrupted(tmp_path: Path, signum: int) -> None:
    """Kill ``heteroplan simulate`` once its first policy is written: that result is complete."""
    out = tmp_path / "out"
    # fifo on the whole trace takes seconds; sia after it takes far longer than the kill.
    proc = subprocess.Popen([sys.executable, "-m", "heteroplan.cli", "simulate", "--workload", "saturn/workload-1",
                             "--policy", "fifo", "--policy", "sia", "--out", str(out), "--quiet"],
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (out / "fifo.json").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, stderr[-2000:]
    assert "interrupted" in stderr and "fifo" in stderr
    saved = json.loads((out / "fifo.json").read_text())
    meta, result = saved["meta"], saved["result"]
    assert meta["heteroplan_version"] and len(meta["inputs_sha256"]) == 64
    assert meta["options"]["policies"] == ["fifo", "sia"]
    assert result["summary"]["policy"] == "fifo" and result["summary"]["jobs"] == len(result["jobs"]) == meta["jobs"]
    assert result["summary"]["finished"] == meta["jobs"]  # complete: every job of the trace
    assert set(json.loads((out / "results.json").read_text())) == {"fifo"}
    run = json.loads((out / "run.json").read_text())
    assert run["completed"] == ["fifo"] and run["interrupted"] == signal.Signals(signum).name
    assert "fifo" in stdout  # the table of what finished is still printed


def test_signal_inside_an_extension_import_still_counts_as_interrupted(tmp_path: Path, monkeypatch) -> None:
    """A SIGTERM landing while highspy's C module initialises surfaces as ``ImportError:
    initialization failed`` (seen in CI); the command must still stop as interrupted, keep
    the finished policy and exit 128 + SIGTERM, not die with a traceback."""
    from heteroplan.cli import main
    from heteroplan.commands import simulate as command
    from heteroplan.policies.registry import make_policy

    def make(name: str, **options):
        if name == "sia":  # what pybind11 does with an exception raised during module init
            try:
                os.kill(os.getpid(), signal.SIGTERM)
            except command.Interrupted:
                raise ImportError("initialization failed") from None
        return make_policy(name, **options)

    monkeypatch.setattr(command, "make_policy", make)
    out = tmp_path / "out"
    code = main(["simulate", "--workload", "saturn/workload-1", "--jobs", "4", "--policy", "fifo",
                 "--policy", "sia", "--out", str(out), "--quiet"])
    assert code == 128 + signal.SIGTERM
    run = json.loads((out / "run.json").read_text())
    assert run["completed"] == ["fifo"] and run["interrupted"] == "SIGTERM"


def test_public_names_import_lazily_from_the_package() -> None:
    code = ("import sys, heteroplan\n"
            "assert not any(m.startswith(('heteroplan.', 'numpy', 'torch')) for m in sys.modules), 'eager'\n"
            "from heteroplan import Plan, SimResult, bundled_workload, compare_policies, plan_job, preset, solve\n"
            "assert preset('sia-64').num_gpus == 64 and 'torch' not in sys.modules\n"
            "assert set(heteroplan.__all__) == {'__version__', *heteroplan._PUBLIC}\n"
            "print('ok')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=120)
    assert proc.stdout == "ok\n", proc.stderr[-2000:]


def test_plan_out_writes_a_plan_that_reads_back(tmp_path: Path, capsys) -> None:
    from heteroplan.cli import main
    from heteroplan.planner.plan import Plan

    out = tmp_path / "plans" / "plan.json"
    assert main(["plan", "--model", "OPT-350", "--gbs", "256", "--gpus", "A100-40@us-central1-a=8",
                 "--json", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert Plan.from_json(out) == Plan.from_dict(printed["plan"])


@pytest.mark.parametrize("argv", [
    ["demo", "--jobs", "3", "--policy", "fifo"],
    ["simulate", "--jobs", "3", "--policy", "fifo", "--policy", "yarn-cs"],
    ["hadar", "--jobs", "4", "--policy", "yarn-cs"],
])
def test_json_output_is_only_json(argv: list[str], capsys) -> None:
    from heteroplan.cli import main

    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)  # headers went to stderr
    if argv[0] == "hadar":
        assert set(data) == {"yarn-cs"} and data["yarn-cs"]["unfinished"] == 0
    else:
        assert [row["policy"] for row in data] == [p for p in argv if p in ("fifo", "yarn-cs")]
        assert all(row["finished"] == 3 for row in data)


def test_verbose_shows_the_library_log_and_quiet_does_not(tmp_path: Path) -> None:
    csv = tmp_path / "w.csv"
    csv.write_text("name,time,application,num_replicas,batch_size\nj,0,cifar10,1,128\nj,5,cifar10,1,128\n")
    base = [sys.executable, "-m", "heteroplan.cli"]
    args = ["simulate", "--workload", str(csv), "--policy", "fifo", "--quiet"]
    loud = subprocess.run([*base, "--verbose", *args], capture_output=True, text=True, env=ENV, timeout=120)
    quiet = subprocess.run([*base, *args], capture_output=True, text=True, env=ENV, timeout=120)
    assert loud.returncode == quiet.returncode == 0
    assert "renamed 'j#1'" in loud.stderr and "renamed" not in quiet.stderr + quiet.stdout

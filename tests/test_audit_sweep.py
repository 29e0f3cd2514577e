"""Audit (issue 36): sweep files are checked whole before anything is created; a sweep's name
cannot move its output out of ``sweeps/``; workers are bounded and die with the sweep."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from heteroplan.cli import main
from heteroplan.errors import InputError
from heteroplan.sim.sweep import load_sweep
from heteroplan.sim.sweep.executors import ProcessExecutor, cores
from heteroplan.sim.sweep.store import ResultStore

ROOT = Path(__file__).resolve().parent.parent
BASE = """
simulator = "{simulator}"
{top}
[[workloads]]
{workload}
[[clusters]]
preset = "sia-64"
[[policies]]
name = "{policy}"
{options}
"""


def sweep_file(tmp_path: Path, *, top: str = 'name = "s"', workload: str = 'bundled = "philly/workload-1"',
               policy: str = "fifo", options: str = "", simulator: str = "sia") -> Path:
    path = tmp_path / "in" / "s.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(BASE.format(top=top, workload=workload, policy=policy, options=options, simulator=simulator))
    return path


def exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code)


@pytest.mark.parametrize("name", ["../../escaped", "", "/tmp/heteroplan-escaped", ".", "a/b", ".."])
def test_a_sweep_name_cannot_leave_sweeps(tmp_path, monkeypatch, capsys, name) -> None:
    monkeypatch.chdir(tmp_path)
    path = sweep_file(tmp_path, top=f"name = {name!r}".replace("'", '"'))
    assert exit_code(["sweep", str(path), "--inprocess", "--quiet"]) == 2
    assert "name=" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]  # nothing written, in or out of sweeps/
    assert not Path("/tmp/heteroplan-escaped").exists()


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"workload": 'file = "w.csv"'}, "application"),
    ({"policy": "sia", "options": 'options = { mode = "bogus" }'}, "mode"),
    ({"policy": "sia", "options": "options = { time_limit = -1 }"}, "time_limit"),
    ({"policy": "gavel", "options": "options = { time_limit = -1 }", "simulator": "slotted",
      "workload": 'generate = "gavel"\njobs = 4'}, "time_limit"),
    ({"simulator": "slotted", "workload": 'generate = "gavel"\njobs = 4\nrate = 0'}, "rate"),
    ({"simulator": "slotted", "workload": 'generate = "gavel"\njobs = 4\nduration_scale = -1'}, "duration_scale"),
    ({"top": 'name = "s"\nround = 0.001'}, "round"),
    ({"top": 'name = "s"', "policy": "fifo"} | {"workload": 'bundled = "philly/workload-1"'}, None),
])
def test_cells_that_would_all_fail_are_refused_up_front(tmp_path, capsys, kwargs, field) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "w.csv").write_text("name,time,application,num_replicas,batch_size\nj,0,nosuchapp,1,128\n")
    path = sweep_file(tmp_path, **kwargs)
    out = tmp_path / "out"
    if field is None:  # the control: the same file without the fault parses
        assert load_sweep(path).cells()
        return
    assert exit_code(["sweep", str(path), "--out", str(out), "--inprocess", "--quiet"]) == 2
    assert field in capsys.readouterr().err
    assert not out.exists()


def test_sweep_files_that_are_not_utf8_are_input_errors(tmp_path) -> None:
    path = tmp_path / "s.toml"
    path.write_bytes(b'name = "\xff"\n')
    with pytest.raises(InputError, match="UTF-8"):
        load_sweep(path)
    path.write_text("x = " + "[" * 10_000 + "]" * 10_000 + "\n")
    with pytest.raises(InputError, match="nested"):
        load_sweep(path)
    path.write_text("jobs = " + "7" * 5000 + "\n")
    with pytest.raises(InputError, match="digits"):
        load_sweep(path)


@pytest.mark.parametrize("text", ['{"key": "k", "status": "ok"', "[" * 10_000 + "]" * 10_000,
                                  '{"key": "k", "status": "ok", "n": ' + "9" * 5000 + "}", "[1, 2]"])
def test_unreadable_cell_records_rerun_instead_of_crashing(tmp_path, text) -> None:
    store = ResultStore(tmp_path)
    store.path("k").write_text(text)
    assert store.load("k") is None and store.status("k") is None
    store.path("k").write_bytes(b'{"key": "k", "status": "\xff"}')
    assert store.load("k") is None


def test_workers_are_capped_at_the_cores(capsys) -> None:
    assert ProcessExecutor(5000).workers == cores()
    assert ProcessExecutor(5000).requested == 5000


WORKER_SCRIPT = """
import os, sys, time
from heteroplan.sim.sweep import run_sweep

def sleeper(cell):
    (OUT / f"{os.getpid()}.pid").write_text("")
    time.sleep(600)
    return {"metrics": {}, "jcts": [], "error": None}

if __name__ == "__main__":
    from pathlib import Path
    OUT = Path(sys.argv[1])
    spec = {"name": "orphans", "seeds": [0, 1, 2, 3], "workloads": [{"bundled": "philly/workload-1"}],
            "clusters": [{"preset": "sia-64"}], "policies": [{"name": "fifo"}]}
    run_sweep(spec, OUT / "out", workers=2, progress=False, cell_fn=sleeper)
else:
    from pathlib import Path
    OUT = Path(os.environ["ORPHAN_DIR"])
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find the workers")
def test_workers_exit_when_the_sweep_is_killed(tmp_path) -> None:
    script = tmp_path / "sweep_script.py"
    script.write_text(textwrap.dedent(WORKER_SCRIPT))
    env = dict(os.environ, PYTHONPATH=str(ROOT), ORPHAN_DIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)], env=env)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while len(workers) < min(2, cores()) and time.monotonic() < deadline:
            time.sleep(0.2)
            workers = [int(p.stem) for p in tmp_path.glob("*.pid")]
        assert workers, "no worker started"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 60
        while any(Path(f"/proc/{pid}").exists() for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        alive = [pid for pid in workers if Path(f"/proc/{pid}").exists()]
        assert alive == [], f"workers {alive} outlived the sweep"
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in workers:  # only the workers this test started
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

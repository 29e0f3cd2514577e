"""Failure handling an operator can trust: signals stop every rank, bad checkpoint directories and
corrupt checkpoints are found before they cost a run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the runtime needs torch")

from heteroplan.errors import InputError  # noqa: E402
from heteroplan.planner.plan import Plan, ReplicaGroup, Stage  # noqa: E402
from heteroplan.runtime import RunConfig, TinyGPTTask, latest_checkpoint, run_plan, train_reference  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TASK = TinyGPTTask(n_layers=2, d_model=16, dtype="float64")
PLAN = Plan("tiny-gpt", 8, 2, (Stage(0, 4, (ReplicaGroup("cpu", "local", 1, 2),)),))
ONE = Plan("tiny-gpt", 8, 4, (Stage(0, 4, (ReplicaGroup("cpu", "local"),)),))  # one process: cheap


def descendants(pid: int) -> set[int]:
    """Processes below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.add(child)
            todo.append(child)
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process tree from /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM])
def test_signal_to_the_launcher_stops_every_rank(tmp_path: Path, sig: signal.Signals) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "heteroplan.cli", "run", "--pp", "2", "--dp", "1", "--layers", "2", "--steps", "100000",
           "--checkpoint-dir", str(tmp_path / "ck")]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in proc.stdout:  # wait for the first iteration: every rank is up and training
            if line.split()[:1] == ["1"]:
                break
        ranks = descendants(proc.pid)
        assert len(ranks) >= 2
        proc.send_signal(sig)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and ({p for p in ranks if alive(p)} or proc.poll() is None):
            time.sleep(0.1)
        assert not {p for p in ranks if alive(p)}, "ranks outlived the launcher's stop"
        assert proc.wait(timeout=1) != 0
    finally:
        proc.kill()
        proc.wait()


def test_unwritable_checkpoint_dir_fails_before_training(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    t0 = time.monotonic()
    with pytest.raises(InputError, match="config.checkpoint_dir"):
        run_plan(PLAN, TASK, RunConfig(steps=3, checkpoint_dir=str(blocker / "ckpt")))
    assert time.monotonic() - t0 < 5  # refused in the launcher, no rank was started


def test_corrupted_newest_checkpoint_resumes_from_the_one_before(tmp_path: Path) -> None:
    config = RunConfig(steps=3, lr=0.05, checkpoint_dir=str(tmp_path), checkpoint_every=1, keep_checkpoints=3)
    first = run_plan(ONE, TASK, config)
    assert first.checkpoint.step == 3
    shard = next(p for p in first.checkpoint.path.iterdir() if p.suffix == ".distcp")
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])  # truncated, as by a full disk
    good = latest_checkpoint(tmp_path)
    assert good is not None and good.step == 2
    resumed = run_plan(ONE, TASK, RunConfig(**{**config.__dict__, "steps": 4}))
    _, losses = train_reference(TASK, 8, RunConfig(**{**config.__dict__, "steps": 4}))
    assert resumed.start_step == 2 and resumed.losses == pytest.approx(losses[2:], rel=1e-9)
    # a manifest that is not JSON is named in the error
    broken = tmp_path / "step-00000009" / "manifest.json"
    broken.parent.mkdir()
    broken.write_text('{"step": 9, "num_la')
    with pytest.raises(InputError, match="step-00000009/manifest.json"):
        latest_checkpoint(tmp_path)
    assert json.loads((resumed.checkpoint.path / "manifest.json").read_text())["files"]


def test_a_cuda_plan_needs_a_gpu_per_rank_and_is_never_scaled_down() -> None:
    if torch.cuda.device_count() >= PLAN.num_gpus:
        pytest.skip("this machine has enough GPUs for the plan")
    with pytest.raises(InputError, match="CUDA devices"):
        run_plan(PLAN, TASK, RunConfig(steps=1, device="cuda"))

"""The multi-node path: two ``torchrun`` agents (``--nnodes 2``, c10d rendezvous on 127.0.0.1)
train a PP x DP plan of a user's model (``--model package.module:factory``) and get the
parameters of single-process training."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the runtime tests need torch: pip install torch==2.13.0 (CPU wheel: --index-url https://download.pytorch.org/whl/cpu)")

from heteroplan.planner.plan import Plan, ReplicaGroup, Stage  # noqa: E402
from heteroplan.runtime import RunConfig, TinyGPTTask, latest_checkpoint, train_reference  # noqa: E402
from heteroplan.runtime.netbench import free_port  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FACTORY = '''from heteroplan.runtime import TinyGPTTask


def task():
    return TinyGPTTask(n_layers=2, dtype="float64")
'''


def test_two_torchrun_agents_train_a_pp_dp_plan_like_one_process(tmp_path: Path) -> None:
    (tmp_path / "two_node_task.py").write_text(FACTORY)
    group = (ReplicaGroup("cpu", "node", 1, 2),)
    plan = Plan("tiny-gpt", 8, 2, (Stage(0, 2, group), Stage(2, 4, group)), (3, 1))  # PP 2 x DP 2, 4 ranks
    plan.to_json(tmp_path / "plan.json")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path)]), OMP_NUM_THREADS="1")
    endpoint = f"127.0.0.1:{free_port()}"
    agents = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "2",
         "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "heteroplan-test",
         "--max-restarts", "0",
         "-m", "heteroplan.runtime.worker", "--plan", str(tmp_path / "plan.json"), "--model", "two_node_task:task",
         "--steps", "3", "--optimizer", "sgd", "--lr", "0.05", "--timeout", "60",
         "--checkpoint-dir", str(tmp_path / "ck")],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = []
    try:
        for agent in agents:
            outputs.append(agent.communicate(timeout=400))
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.kill()
                agent.wait()
    assert all(a.returncode == 0 for a in agents), "\n".join(err[-2000:] for _, err in outputs)
    task = TinyGPTTask(n_layers=2, dtype="float64")
    reference, losses = train_reference(task, 8, RunConfig(steps=3, optimizer="sgd", lr=0.05))
    printed = [float(line.split()[3]) for out, _ in outputs for line in out.splitlines() if line.startswith("step")]
    assert printed == pytest.approx(losses, rel=1e-4)  # printed with 4 decimals by the node holding rank 0
    state = latest_checkpoint(tmp_path / "ck").model_state()
    assert max(float((state[k] - v).abs().max()) for k, v in reference.state_dict().items()) < 1e-9

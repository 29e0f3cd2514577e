"""Audit (issue 36): ``heteroplan run`` and ``profile`` start a bounded number of local
processes, exit 128 + signal number when stopped, and fail on a loss that is not finite."""

from __future__ import annotations

import signal
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch", reason="the runtime tests need torch: pip install torch (CPU build)")

from heteroplan.commands.run import exit_code as run_exit_code  # noqa: E402
from heteroplan.inputs import local_process_limit  # noqa: E402
from heteroplan.planner.plan import Plan, ReplicaGroup, Stage  # noqa: E402


def test_run_refuses_more_local_processes_than_the_machine_can_hold(tmp_path, cli_error) -> None:
    assert "--pp x --dp=100000" in cli_error(["run", "--pp", "1", "--dp", "100000"])
    big = Plan("tiny-gpt", 1024, 1, (Stage(0, 6, (ReplicaGroup("cpu", "local", 1, 512),)),))
    big.to_json(tmp_path / "plan.json")
    assert "--plan=512" in cli_error(["run", "--plan", str(tmp_path / "plan.json")])
    assert local_process_limit() < 512


def test_profile_refuses_500_network_processes(tmp_path, cli_error) -> None:
    err = cli_error(["profile", "--out", str(tmp_path / "d"), "--world-size", "500"])
    assert "--world-size=500" in err
    assert not (tmp_path / "d").exists()  # refused before any profiling


def test_profile_with_cuda_graphs_on_a_cpu_is_refused_naming_the_option(tmp_path, cli_error) -> None:
    err = cli_error(["profile", "--out", str(tmp_path / "d"), "--cuda-graphs", "--no-network"])
    assert "cuda_graphs" in err and "CUDA device" in err
    assert not (tmp_path / "d").exists()


def test_run_exit_code_says_which_signal_stopped_it() -> None:
    stopped = SimpleNamespace(stopped_early=True, signal=signal.SIGTERM)
    assert run_exit_code(stopped) == 143  # docs/errors.md: 130 SIGINT, 143 SIGTERM
    assert run_exit_code(SimpleNamespace(stopped_early=True, signal=signal.SIGINT)) == 130
    assert run_exit_code(SimpleNamespace(stopped_early=False, signal=None)) == 0


def test_a_diverging_run_fails_with_a_clear_error(cli_error) -> None:
    err = cli_error(["run", "--pp", "1", "--dp", "1", "--layers", "1", "--steps", "3", "--optimizer", "sgd",
                     "--lr", "1e30", "--mbs", "2"])
    assert "--lr=1e+30" in err and "diverged" in err and "iteration 2 on rank 0" in err  # stopped there, not at the end

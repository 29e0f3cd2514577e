"""Audit (issue 47, the earlier audit's UNBOUNDED class): commands that would run for days with
nothing written are refused above a stated limit naming the flag, and show progress on stderr."""

from __future__ import annotations

import json

import pytest

from heteroplan.cli import main


def exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code)


def _no_simulation(*args, **kwargs):
    raise AssertionError("a simulation started: the size was not refused first")


def test_a_100k_job_hadar_run_is_refused_naming_the_flag_and_the_way_out(monkeypatch, capsys) -> None:
    import heteroplan.sim.loop as loop

    monkeypatch.setattr(loop, "simulate", _no_simulation)
    assert exit_code(["hadar", "--jobs", "100000"]) == 2
    out, err = capsys.readouterr()
    assert "--jobs" in err and "5,000" in err and "sweep" in err
    assert "generated jobs" not in out  # refused before the workload was drawn


def test_hadar_shows_progress_on_a_terminal_and_keeps_its_table(monkeypatch, capsys) -> None:
    argv = ["hadar", "--jobs", "4", "--policy", "yarn-cs"]
    assert exit_code(argv) == 0
    plain_out, plain_err = capsys.readouterr()
    assert "%" not in plain_err  # not a terminal: no bar
    monkeypatch.setattr("sys.stderr.isatty", lambda: True, raising=False)
    assert exit_code(argv) == 0
    out, err = capsys.readouterr()
    assert out == plain_out  # the table on stdout is unchanged
    assert "yarn-cs" in err and "100.0%" in err


def _no_search(*args, **kwargs):
    raise AssertionError("the search started: the size was not refused first")


def test_an_unpruned_plan_on_a_big_pool_is_refused_naming_the_flag(monkeypatch, capsys) -> None:
    import heteroplan.commands.plan as plan_command

    monkeypatch.setattr(plan_command, "plan", _no_search)
    argv = ["plan", "--model", "OPT-350", "--gbs", "64", "--gpus", "A100-40@us-central1-a=512,V100-16@us-central1-a=64"]
    assert exit_code([*argv, "--no-prune"]) == 2
    err = capsys.readouterr().err
    assert "--no-prune" in err and "576 GPUs" in err and "32" in err
    with pytest.raises(AssertionError, match="search started"):  # pruned, the same pool is searched
        exit_code(argv)


def test_an_unpruned_plan_on_a_small_pool_still_runs(capsys) -> None:
    argv = ["plan", "--model", "OPT-350", "--gbs", "8", "--gpus", "A100-40@us-central1-a=2", "--max-pp", "1", "--json"]
    assert exit_code([*argv, "--no-prune"]) == 0
    unpruned = json.loads(capsys.readouterr().out)
    assert exit_code(argv) == 0
    pruned = json.loads(capsys.readouterr().out)
    assert unpruned["plan"] == pruned["plan"]  # the exact scan agrees with the pruned search here

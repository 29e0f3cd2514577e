"""Audit (issue 47, the earlier audit's UNBOUNDED class): commands that would run for days with
nothing written are refused above a stated limit naming the flag, and show progress on stderr."""

from __future__ import annotations

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

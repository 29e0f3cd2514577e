"""The heteroplan command line."""

from __future__ import annotations

import json

import pytest

from heteroplan.cli import main
from heteroplan.version import __version__


def test_version(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert __version__ in capsys.readouterr().out


def test_clusters_json_is_the_preset(capsys) -> None:
    assert main(["clusters", "gavel-108", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert sum(n["num_gpus"] for n in data["nodes"]) == 108


def test_bad_cluster_file_is_a_clear_error(tmp_path, capsys) -> None:
    assert main(["clusters", str(tmp_path / "missing.json")]) == 2
    assert "cannot read cluster JSON" in capsys.readouterr().err


def test_simulate_writes_results_and_plots(tmp_path, capsys) -> None:
    code = main(["simulate", "--workload", "saturn/workload-2", "--jobs", "5", "--policy", "sia",
                 "--policy", "fifo", "--out", str(tmp_path), "--quiet"])
    assert code == 0
    data = json.loads((tmp_path / "results.json").read_text())
    assert set(data) == {"sia", "fifo"}
    assert all(v["summary"]["finished"] == 5 for v in data.values())
    assert (tmp_path / "jct_cdf.png").exists() and (tmp_path / "gpus_sia.png").exists()
    assert "avg_jct_h" in capsys.readouterr().out


def test_simulate_fidelity_ideal_drops_the_artifacts_slowdowns(tmp_path) -> None:
    avg = {}
    for fidelity in ("sia", "ideal"):
        out = tmp_path / fidelity
        assert main(["simulate", "--workload", "philly/workload-1", "--jobs", "3", "--policy", "fifo",
                     "--fidelity", fidelity, "--out", str(out), "--quiet"]) == 0
        avg[fidelity] = json.loads((out / "results.json").read_text())["fifo"]["summary"]["avg_jct_h"]
    assert avg["ideal"] < avg["sia"]


def test_demo_runs_on_bundled_data(capsys) -> None:
    assert main(["demo", "--jobs", "4", "--policy", "sia", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "sia-64" in out and "avg_jct_h" in out


def test_unknown_policy_is_rejected(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--policy", "nope"])
    assert "invalid choice" in capsys.readouterr().err


def test_hadar_command_compares_policies(capsys) -> None:
    assert main(["hadar", "--jobs", "8", "--seed", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # the same table as `simulate`'s: a header of metric names, a rule of dashes, a row per policy
    assert lines[1].split()[:3] == ["policy", "finished", "avg_jct_h"] and set(lines[2]) == {"-", " "}
    rows = {line.split()[0]: line.split()[1:] for line in lines[3:]}
    assert set(rows) == {"hadar", "hadare", "gavel", "yarn-cs"}
    assert all(r[0] == "8" for r in rows.values())  # every job finished
    # On a lightly loaded cluster, forking onto idle GPUs can only shorten jobs.
    assert float(rows["hadare"][1]) <= float(rows["hadar"][1])


def test_hadar_json_is_one_document(capsys) -> None:
    assert main(["hadar", "--jobs", "4", "--policy", "yarn-cs", "--policy", "gavel", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert set(rows) == {"yarn-cs", "gavel"} and rows["gavel"]["unfinished"] == 0
    assert "avg_queueing_delay_h" in rows["gavel"]


# ---------------------------------------------------------------- safe to script
def _walk(parser, path=("heteroplan",)):
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, (*path, name))
        else:
            yield path, action


def test_every_option_of_every_command_has_help() -> None:
    import argparse

    from heteroplan.cli import build_parser

    actions = list(_walk(build_parser()))
    assert len({p for p, _ in actions}) >= 10  # the top level and every command
    missing = [(" ".join(p), a.option_strings or a.dest) for p, a in actions
               if not a.help or a.help == argparse.SUPPRESS]
    assert missing == []


def test_every_command_with_json_has_the_flag_documented_as_one_document() -> None:
    from heteroplan.cli import build_parser

    with_json = {p[-1] for p, a in _walk(build_parser()) if "--json" in a.option_strings}
    assert {"clusters", "simulate", "sweep", "hadar", "plan", "goodput"} <= with_json


def test_clusters_json_is_one_document_for_all_presets(capsys) -> None:
    from heteroplan.cluster import PRESETS

    assert main(["clusters", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)  # one document ("Extra data" before)
    assert set(data) == set(PRESETS)
    assert sum(n["num_gpus"] for n in data["gavel-108"]["nodes"]) == 108


def test_json_output_is_strict_json() -> None:
    import math

    import numpy as np

    from heteroplan.commands.jsonout import to_json_text

    text = to_json_text({"a": float("nan"), "b": [np.float64(1.5), np.int64(2), math.inf], "c": np.arange(2)})
    assert json.loads(text) == {"a": None, "b": [1.5, 2, None], "c": [0, 1]}


@pytest.mark.parametrize("argv", [["clusters", "--json"], ["clusters"], ["clusters", "sia-64", "--json"]])
def test_a_closed_pipe_ends_the_command_quietly(argv) -> None:
    """`heteroplan ... | head -1`: the reader is gone before the command writes (a pipe whose
    read end is closed): no traceback, exit code 141 (128 + SIGPIPE)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    read, write = os.pipe()
    os.close(read)
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    try:
        proc = subprocess.run([sys.executable, "-m", "heteroplan", *argv], stdout=write, stderr=subprocess.PIPE,
                              text=True, env=env, cwd=root, timeout=120)
    finally:
        os.close(write)
    assert proc.stderr == "" and proc.returncode == 141, proc.stderr


def test_clusters_json_pipes_into_a_json_reader() -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    cmd = (f"{sys.executable} -m heteroplan clusters --json | "
           f"{sys.executable} -c \"import json,sys; print(len(json.load(sys.stdin)))\"")
    proc = subprocess.run(cmd, shell=True, capture_output=True, text=True, env=env, cwd=root, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "3", proc.stderr


def test_simulate_json_is_one_strict_document(capsys) -> None:
    """Nothing finishes in 36 simulated seconds: the JCTs are missing, null in strict JSON (NaN before)."""
    assert main(["simulate", "--workload", "saturn/workload-2", "--jobs", "2", "--max-hours", "0.01",
                 "--policy", "fifo", "--json"]) == 0

    def refuse(text):
        raise AssertionError(f"not strict JSON: {text}")

    (summary,) = json.loads(capsys.readouterr().out, parse_constant=refuse)
    assert summary["finished"] == 0 and summary["avg_jct_h"] is None and "avg_queueing_delay_h" in summary

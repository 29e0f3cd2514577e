"""The heteroplan command line."""

from __future__ import annotations

import json

import pytest

from heteroplan import __version__
from heteroplan.cli import main


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
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()[2:]}
    assert set(rows) == {"hadar", "hadare", "gavel", "yarn-cs"}
    assert all(r[-1] == "0" for r in rows.values())  # every job finished
    # On a lightly loaded cluster, forking onto idle GPUs can only shorten jobs.
    assert float(rows["hadare"][0]) <= float(rows["hadar"][0])

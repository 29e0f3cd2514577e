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

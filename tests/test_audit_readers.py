"""Audit (issue 36): every file reader turns a bad file (truncated, not UTF-8, nested 10,000
deep, a 5,000-digit number, the wrong shape, a ``.gz`` that is not gzip) into an InputError
naming the file, never a traceback from json, gzip, csv or numpy."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from heteroplan.cli import main
from heteroplan.cluster import Cluster
from heteroplan.errors import InputError
from heteroplan.inputs import read_json
from heteroplan.perf.sailor_profiles import DATA_DIR

BAD_JSON = {
    "truncated": b'{"a": [1, 2',
    "not utf-8": b'{"a": "\xff\xfe"}',
    "deep": b"[" * 10_000 + b"]" * 10_000,
    "huge integer": b'{"a": ' + b"7" * 5000 + b"}",
}


@pytest.mark.parametrize("content", BAD_JSON.values(), ids=BAD_JSON.keys())
def test_read_json_names_the_file(tmp_path, content) -> None:
    path = tmp_path / "f.json"
    path.write_bytes(content)
    with pytest.raises(InputError, match="f.json"):
        read_json(path, "some file")


@pytest.mark.parametrize("content", BAD_JSON.values(), ids=BAD_JSON.keys())
def test_cluster_files(tmp_path, content, capsys) -> None:
    path = tmp_path / "c.json"
    path.write_bytes(content)
    with pytest.raises(InputError):
        Cluster.from_json(path)
    assert main(["clusters", str(path)]) == 2


def data_dir_with(tmp_path: Path, name: str, content: bytes) -> Path:
    """A copy of the shipped Sailor data (OPT-350 only) with ``name`` replaced by ``content``."""
    root = tmp_path / "data"
    (root / "profiles").mkdir(parents=True)
    shutil.copytree(DATA_DIR / "profiles" / "OPT-350", root / "profiles" / "OPT-350")
    for f in DATA_DIR.glob("*.json"):
        shutil.copy(f, root / f.name)
    (root / name).write_bytes(content)
    return root


@pytest.mark.parametrize("content", [*BAD_JSON.values(), b'{"OPT-350": {"1": [1, 2]}}', b"[1, 2]"],
                         ids=[*BAD_JSON.keys(), "wrong shape", "not an object"])
def test_llm_info(tmp_path, content) -> None:
    from heteroplan.perf.sailor_profiles import load_model_profile

    with pytest.raises(InputError):
        load_model_profile("OPT-350", data_dir_with(tmp_path, "llm_info.json", content))


@pytest.mark.parametrize("content", [*BAD_JSON.values(), b'{"1": {"1": 5}}'],
                         ids=[*BAD_JSON.keys(), "wrong shape"])
def test_profile_files(tmp_path, content) -> None:
    from heteroplan.perf.sailor_profiles import load_model_profile

    gpu = sorted((DATA_DIR / "profiles" / "OPT-350").glob("*.json"))[0].name
    with pytest.raises(InputError):
        load_model_profile("OPT-350", data_dir_with(tmp_path, f"profiles/OPT-350/{gpu}", content))


@pytest.mark.parametrize("content", [*BAD_JSON.values(), b'{"x": 1}'], ids=[*BAD_JSON.keys(), "wrong shape"])
def test_network_files(tmp_path, content) -> None:
    from heteroplan.perf.sailor_network import load_network

    with pytest.raises(InputError):
        load_network(data_dir_with(tmp_path, "network_coeffs_all_homo.json", content))


def test_sim_config_file(tmp_path) -> None:
    from heteroplan.planner.model.sim_config import load_platforms

    for content in BAD_JSON.values():
        (tmp_path / "sim_config.json").write_bytes(content)
        with pytest.raises(InputError, match="sim_config"):
            load_platforms(tmp_path)


def test_gavel_throughputs_file(tmp_path) -> None:
    from heteroplan.workload.gavel import load_throughputs

    for content in [*BAD_JSON.values(), b"[1]"]:
        (tmp_path / "t.json").write_bytes(content)
        with pytest.raises(InputError):
            load_throughputs(tmp_path / "t.json")


@pytest.mark.parametrize(("name", "content"), [
    ("p.csv.gz", b"placement,local_bsz,step_time,sync_time\n1,32,0.1,0.01\n"),  # .gz, not gzip
    ("p.csv.gz", gzip.compress(b"placement,local_bsz,step_time,sync_time\n1,32,0.1,0.01\n")[:30]),  # truncated
    ("p.csv", b"placement,local_bsz,step_time,sync_time\n1,32,\xff,0.01\n"),
    ("p.csv", b"placement,local_bsz,step_time,sync_time\n1,32,0.1\x00,0.01\n"),
])
def test_measurement_csvs(tmp_path, name, content) -> None:
    from heteroplan.perf.measurements import load_placements

    (tmp_path / name).write_bytes(content)
    with pytest.raises(InputError):
        load_placements(tmp_path / name)


def test_plan_files_for_run(tmp_path) -> None:
    pytest.importorskip("torch", reason="heteroplan.runtime needs torch: pip install torch==2.13.0 (CPU wheel)")
    from heteroplan.runtime.layout import load_plan

    for content in BAD_JSON.values():
        (tmp_path / "plan.json").write_bytes(content)
        with pytest.raises(InputError, match="--plan"):
            load_plan(tmp_path / "plan.json")


def test_the_shipped_files_still_read() -> None:
    from heteroplan.perf.sailor_network import load_network
    from heteroplan.perf.sailor_profiles import available_models, load_model_profile

    assert all(load_model_profile(m).num_layers > 0 for m in available_models())
    assert load_network().zones

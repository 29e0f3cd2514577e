"""Issue 47 (item 3): a checkpoint's manifest is covered by its own checksum and agrees with its
directory; an edited or damaged one is refused naming the file, never trusted (a manifest claiming
step 1e12 would train nothing and exit 0)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the checkpoint tests need torch: pip install torch (CPU build)")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from heteroplan.errors import InputError  # noqa: E402
from heteroplan.runtime import checkpoint as ckpt  # noqa: E402


def saved(root: Path, step: int) -> ckpt.Checkpoint:
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.warns(UserWarning):  # DCP: "assuming the intent is to save in a single process"
        ckpt.save_state(root, step, model, optimizer)
    return ckpt.write_manifest(root, step, 1, {"loss": float("nan") if step == 2 else 0.5})


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ck")
    saved(root, 1)
    saved(root, 2)
    return root


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def _edit(root: Path, step: int, change) -> Path:
    path = ckpt.step_dir(root, step) / ckpt.MANIFEST
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    return path


def test_a_written_manifest_carries_its_checksum_and_reads_back(two_steps: Path) -> None:
    latest = ckpt.latest_checkpoint(two_steps)
    assert latest is not None and latest.step == 2 and latest.manifest["format"] == ckpt.MANIFEST_FORMAT
    assert len(latest.manifest["manifest_sha256"]) == 64 and latest.loss != latest.loss  # NaN kept


@pytest.mark.parametrize("change", [
    lambda d: d.update(step=10**12),
    lambda d: d.update(step=1e12),
    lambda d: d.update(num_layers=2),
    lambda d: d.update(loss=0.1),
    lambda d: d["files"].update({".metadata": "0" * 64}),
    lambda d: d.update(manifest_sha256="f" * 64),
    lambda d: d.update(extra=1),
    lambda d: d.update(format=3),
])
def test_an_edited_manifest_is_refused_naming_the_file(tmp_path: Path, two_steps: Path, change) -> None:
    root = _copy(two_steps, tmp_path / "ck")
    path = _edit(root, 2, change)
    with pytest.raises(InputError, match="step-00000002/manifest.json.*corrupt") as err:
        ckpt.latest_checkpoint(root)
    assert err.value.field == "checkpoint manifest"
    assert str(path) in str(err.value)


def test_a_manifest_with_a_recomputed_checksum_must_still_agree_with_its_directory(tmp_path: Path,
                                                                                   two_steps: Path) -> None:
    root = _copy(two_steps, tmp_path / "ck")

    def claim(data: dict) -> None:
        data["step"] = 10**12
        data["manifest_sha256"] = ckpt._manifest_sha256(data)

    _edit(root, 2, claim)
    with pytest.raises(InputError, match="claims step 1000000000000, its directory is step-00000002"):
        ckpt.latest_checkpoint(root)

    def escape(data: dict) -> None:
        data["step"] = 2
        data["files"] = {"../../etc/passwd": "0" * 64}
        data["manifest_sha256"] = ckpt._manifest_sha256(data)

    _edit(root, 2, escape)
    with pytest.raises(InputError, match="path separator"):
        ckpt.latest_checkpoint(root)


def test_a_damaged_shard_still_falls_back_to_the_checkpoint_before(tmp_path: Path, two_steps: Path) -> None:
    root = _copy(two_steps, tmp_path / "ck")
    shard = next(p for p in ckpt.step_dir(root, 2).iterdir() if p.suffix == ".distcp")
    shard.write_bytes(shard.read_bytes()[:10])
    latest = ckpt.latest_checkpoint(root)
    assert latest is not None and latest.step == 1


def test_a_manifest_of_an_older_version_is_read_with_a_warning(tmp_path: Path, two_steps: Path, caplog) -> None:
    root = _copy(two_steps, tmp_path / "ck")
    _edit(root, 2, lambda d: (d.pop("format"), d.pop("manifest_sha256")))
    with caplog.at_level(logging.WARNING, logger="heteroplan.runtime.checkpoint"):
        latest = ckpt.latest_checkpoint(root)
    assert latest is not None and latest.step == 2 and "no checksum of its own" in caplog.text
    _edit(root, 2, lambda d: d.update(step=10**12))  # an old manifest is still checked against its directory
    with pytest.raises(InputError, match="claims step"):
        ckpt.latest_checkpoint(root)


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                     max_leaves=8)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(["step", "num_layers", "files", "loss", "plan", "format", "manifest_sha256", "new"]),
       value=_JSON)
def test_any_change_to_any_field_is_refused_or_changes_nothing(tmp_path_factory, two_steps: Path, key: str,
                                                               value: object) -> None:
    root = _copy(two_steps, tmp_path_factory.mktemp("h") / "ck")
    path = ckpt.step_dir(root, 2) / ckpt.MANIFEST
    before = json.loads(path.read_text())
    _edit(root, 2, lambda d: d.update({key: value}))
    after = json.loads(path.read_text())
    try:
        latest = ckpt.latest_checkpoint(root)
    except InputError as exc:
        assert exc.field == "checkpoint manifest" and str(path) in str(exc)
        return
    assert json.dumps(after, sort_keys=True) == json.dumps(before, sort_keys=True)  # only a no-op edit passes
    assert latest is not None and latest.step == 2

"""Audit (issue 36): a checkpoint directory cannot run code when a run resumes from it."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the checkpoint tests need torch: pip install torch (CPU build)")

from heteroplan.errors import InputError  # noqa: E402
from heteroplan.runtime import checkpoint as ckpt  # noqa: E402
from heteroplan.runtime.dcp_safety import read_metadata  # noqa: E402


class _RunsCode:
    """Unpickling this calls ``pathlib.Path.touch`` on ``marker``: what a crafted ``.metadata`` does."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def saved_checkpoint(root: Path, step: int = 1) -> ckpt.Checkpoint:
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    with pytest.warns(UserWarning):  # DCP: "assuming the intent is to save in a single process"
        ckpt.save_state(root, step, model, optimizer)
    return ckpt.write_manifest(root, step, 1, {})


def test_a_genuine_checkpoint_loads_through_the_safe_reader(tmp_path: Path) -> None:
    saved = saved_checkpoint(tmp_path)
    assert ckpt.latest_checkpoint(tmp_path).step == 1
    state = saved.model_state()
    assert set(state) == {"weight", "bias"} and state["weight"].shape == (2, 3)


def test_crafted_metadata_is_refused_without_running_it(tmp_path: Path) -> None:
    saved = saved_checkpoint(tmp_path)
    marker = tmp_path / "pwned"
    (saved.path / ".metadata").write_bytes(pickle.dumps(_RunsCode(marker)))
    ckpt.write_manifest(tmp_path, 1, 1, {})  # checksums written beside the files are no defence
    with pytest.raises(InputError, match="pathlib.Path.touch|refusing"):
        ckpt.latest_checkpoint(tmp_path)
    with pytest.raises(InputError, match="refusing"):
        saved.model_state()
    with pytest.raises(InputError, match="refusing"):
        read_metadata(saved.path / ".metadata")
    assert not marker.exists()


def test_a_truncated_metadata_is_an_input_error(tmp_path: Path) -> None:
    saved = saved_checkpoint(tmp_path)
    path = saved.path / ".metadata"
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(InputError, match="corrupt"):
        read_metadata(path)


def test_a_checkpoint_of_another_model_width_is_a_clear_error(tmp_path: Path) -> None:
    saved = saved_checkpoint(tmp_path)  # Linear(3, 2)
    wider = torch.nn.Linear(5, 2)
    with pytest.raises(InputError, match=r"weight of shape \(2, 3\).*\(2, 5\)"):
        ckpt.load_state(saved, wider, torch.optim.Adam(wider.parameters()))
    deeper = torch.nn.Sequential(torch.nn.Linear(3, 2))
    with pytest.raises(InputError, match="has no parameter '0.weight'"):
        ckpt.load_state(saved, deeper, torch.optim.Adam(deeper.parameters()))

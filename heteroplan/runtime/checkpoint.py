"""Checkpoints with ``torch.distributed.checkpoint`` (DCP), keyed by layer, so a run resumes under another plan.

Layout: ``<root>/step-00000012/`` holds DCP's files (``.metadata``, ``__<rank>_0.distcp``) for the
state ``{"model": ..., "optim": ...}`` whose keys are the *global* layer names of the full model
(``"3.q.weight"``, ``"optim"`` flattened per parameter), and ``manifest.json``, written last by
rank 0 after every rank has saved, with the SHA-256 of every file and of the manifest itself
(``manifest_sha256``, over its other fields). DCP stores each tensor's shards
with their offsets and reads whatever slices the loading ranks need, so a checkpoint written by
TP 2 x DP 2 with 2 stages resumes on TP 1 x DP 4 with 1 stage (rescale, resharding included).

A directory without a manifest is an incomplete checkpoint and is skipped; one whose files do not
match their checksums (truncated, corrupted) is skipped with a warning, so resume falls back to
the newest good checkpoint. A manifest that is not valid JSON, does not match its own checksum
(edited or damaged), or claims another step than its directory's is an :class:`InputError` naming
it, and so is a ``.metadata`` that names anything but DCP's metadata classes (see :mod:`.dcp_safety`).
A manifest of an older version (no ``format``, no checksum of its own) is read with a warning.
Every manifest is decoded by :data:`MANIFEST_FILE` (:mod:`heteroplan.schema`): typed fields,
bounded counts, no unknown keys.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from heteroplan.atomic_json import write_json_atomic
from heteroplan.errors import InputError
from heteroplan.names import a_path, path_component
from heteroplan.planner.plan import PLAN_FILE
from heteroplan.schema import (
    MAX_ITEMS,
    Nullable,
    Number,
    Record,
    Seq,
    Table,
    Text,
    Versioned,
    check,
    decode,
)

__all__ = ["Checkpoint", "MANIFEST_FILE", "latest_checkpoint", "save_state", "load_state", "write_manifest",
           "prune", "check_writable", "verify"]

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 2
"""Version of ``manifest.json``: 2 holds ``format`` and ``manifest_sha256`` (1, unversioned: neither)."""
_STEP_DIR = re.compile(r"step-(\d{8,})")
_SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_STEP = 2**53
"""Largest step a manifest may claim (iterations; integers JSON keeps exactly)."""
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint: the iteration it follows and where it lies."""

    step: int
    path: Path
    manifest: dict[str, Any]

    @property
    def loss(self) -> float | None:
        """Training loss of the last iteration before the checkpoint."""
        return self.manifest.get("loss")

    def model_state(self) -> dict[str, torch.Tensor]:
        """The full model's ``state_dict`` (keys ``"<layer>.<name>"``, as in ``nn.Sequential``), in this process."""
        from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

        from heteroplan.runtime.dcp_safety import SafeEmptyLoadPlanner, SafeReader, read_metadata

        read_metadata(self.path / ".metadata")  # a clear InputError, not DCP's wrapped one
        blob: dict[str, Any] = {}  # filled with everything saved, as dcp_to_torch_save does
        _load_state_dict(blob, storage_reader=SafeReader(self.path), planner=SafeEmptyLoadPlanner(), no_dist=True)
        return {k[len("model."):]: v for k, v in _flatten(blob).items() if k.startswith("model.")}


def _flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def step_dir(root: str | Path, step: int) -> Path:
    return Path(root) / f"step-{step:08d}"


def check_writable(root: str | Path | None) -> None:
    """Raise :class:`InputError` unless checkpoints can be written under ``root`` (checked before training)."""
    if root is None:
        return
    try:
        Path(root).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".write-test-"):  # a unique name, created exclusively
            pass
    except OSError as exc:
        raise InputError("config.checkpoint_dir", str(root), f"cannot write checkpoints there: {exc}") from None


def _manifest_sha256(data: dict[str, Any]) -> str:
    """SHA-256 of the manifest's fields but ``manifest_sha256`` (canonical JSON: sorted keys, no spaces)."""
    body = {k: v for k, v in data.items() if k != "manifest_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _manifest_spec(versioned: bool) -> Record:
    """The fields of a manifest: of format 2 (``versioned``) or of an older, unversioned one."""
    checksum = {"manifest_sha256": Text(min_len=64, max_len=64)} if versioned else {}
    return Record(required={"step": Number(low=0, high=MAX_STEP, integer=True),
                            "num_layers": Number(low=1, high=MAX_ITEMS, integer=True),
                            "files": Table(Text(min_len=64, max_len=64)),  # file name -> SHA-256 (hex)
                            **checksum},
                  optional={"loss": Nullable(Number(finite=False)), "plan": PLAN_FILE,
                            "pipelines": Seq(PLAN_FILE, 1, MAX_ITEMS)}, missing="missing")


MANIFEST_FILE = Versioned({1: _manifest_spec(False), MANIFEST_FORMAT: _manifest_spec(True)}, key="format")
"""``manifest.json``: ``step``, ``num_layers``, ``files`` (name -> SHA-256), the training ``loss``
before it (NaN kept) and the ``plan`` (a plan file's dict), or the ``pipelines`` of a
:class:`~heteroplan.planner.pipeline_set.PipelineSet` (a list of them); format 2 adds ``format`` and
``manifest_sha256``, the SHA-256 of its other fields."""


def _read_manifest(path: Path) -> dict[str, Any]:
    """The manifest at ``path`` (``<root>/step-<n>/manifest.json``), decoded by :data:`MANIFEST_FILE`,
    checked against its own checksum and its directory; :class:`InputError` naming the file when
    it is corrupt."""
    def corrupt(why: str) -> InputError:
        return InputError("checkpoint manifest", str(path), f"is corrupt ({why}); delete its directory")

    try:
        data = json.loads(path.read_text())  # not read_json: a manifest may hold a loss of NaN
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise corrupt(repr(exc)) from None
    try:
        check(not isinstance(data, dict) or data.get("format", MANIFEST_FORMAT) == MANIFEST_FORMAT, "format",
              data.get("format") if isinstance(data, dict) else None,
              f"this version reads {MANIFEST_FORMAT} (or none: written before manifests had versions)")
        manifest = decode(MANIFEST_FILE, data)
        for name, digest in manifest["files"].items():
            path_component("files", name)
            check(_SHA256.fullmatch(digest) is not None, f"files[{name}]", digest,
                  "must be a SHA-256 digest (64 hex digits)")
    except InputError as exc:
        raise corrupt(str(exc)) from None
    if "format" in manifest:
        if manifest["manifest_sha256"] != _manifest_sha256(data):
            raise corrupt("it does not match its own checksum: edited or damaged")
    else:
        log.warning("checkpoint manifest %s has no checksum of its own (written by an older heteroplan): "
                    "its fields are checked, not its integrity", path)
    step = manifest["step"]
    named = _STEP_DIR.fullmatch(path.parent.name)
    if named is None or int(named.group(1)) != step:
        raise corrupt(f"it claims step {step}, its directory is {path.parent.name}")
    return manifest


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify(ckpt: Checkpoint) -> str | None:
    """Why ``ckpt``'s files do not match its manifest's checksums, or ``None`` when they do."""
    files = ckpt.manifest.get("files")
    if not isinstance(files, dict) or not files:
        return "the manifest lists no files"
    for name, digest in files.items():
        path = ckpt.path / name
        if not path.is_file():
            return f"{name} is missing"
        if _sha256(path) != digest:
            return f"{name} does not match its checksum"
    return None


def latest_checkpoint(root: str | Path | None, check: bool = True) -> Checkpoint | None:
    """The newest complete checkpoint under ``root`` whose files match their checksums (``None``: none).

    Broken ones are skipped with a warning (``check=False``: trust the manifests).
    """
    if root is None or not a_path("checkpoint_dir", root).is_dir():  # 5 was a TypeError from pathlib
        return None
    found = []
    for d in Path(root).glob("step-*"):
        manifest = d / MANIFEST
        if manifest.is_file():
            data = _read_manifest(manifest)
            found.append(Checkpoint(int(data["step"]), d, data))
    for ckpt in sorted(found, key=lambda c: c.step, reverse=True):
        problem = verify(ckpt) if check else None
        if problem is None:
            from heteroplan.runtime.dcp_safety import read_metadata

            read_metadata(ckpt.path / ".metadata")  # InputError if it names code to run, before any rank loads it
            return ckpt
        log.warning("skipping checkpoint %s: %s", ckpt.path, problem)
    return None


def _state(module: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    options = StateDictOptions(flatten_optimizer_state_dict=True)
    return {"model": get_model_state_dict(module), "optim": get_optimizer_state_dict(module, optimizer, options=options)}


def save_state(root: str | Path, step: int, module: nn.Module, optimizer: torch.optim.Optimizer,
               group: Any = None, layers: frozenset[int] | None = None) -> Path:
    """Save this rank's layers and optimizer state (collective over ``group``: every rank of the plan
    calls it); ``layers``: only the parameters (and their state) of these layers (``None``: all of
    the rank's). Replicas whose pieces of a tensor overlap (different TP degrees) must not all write it."""
    import torch.distributed.checkpoint as dcp

    d = step_dir(root, step)
    state = _state(module, optimizer)
    if layers is not None:
        state = {part: {k: v for k, v in entries.items() if _layer_of(k) in layers} for part, entries in state.items()}
    dcp.save(state, checkpoint_id=d, process_group=group)
    return d


def _layer_of(key: str) -> int | None:
    """The layer a state key belongs to: its first number (``"3.q.weight"``, ``"state.3.q.weight.exp_avg"``)."""
    return next((int(part) for part in key.split(".") if part.isdigit()), None)


def load_state(ckpt: Checkpoint, module: nn.Module, optimizer: torch.optim.Optimizer, group: Any = None) -> None:
    """Restore this rank's layers and their optimizer state from ``ckpt`` (collective, any layout).

    The parameters' gradients are set aside meanwhile and put back after: DCP creates a fresh
    optimizer's state by a step with zero gradients only when no parameter has one, and sets
    them to ``None`` after it (the runtime's gradients are views of one buffer,
    :func:`~heteroplan.runtime.worker.flat_gradients`, which must stay bound)."""
    grads = [(p, p.grad) for p in module.parameters()]
    for p, _ in grads:
        p.grad = None
    try:
        _load_state(ckpt, module, optimizer, group)
    finally:
        for p, grad in grads:
            p.grad = grad


def _load_state(ckpt: Checkpoint, module: nn.Module, optimizer: torch.optim.Optimizer, group: Any) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    from heteroplan.runtime.dcp_safety import SafeLoadPlanner, SafeReader, read_metadata

    metadata = read_metadata(ckpt.path / ".metadata")  # a clear InputError, not DCP's wrapped one
    state = _state(module, optimizer)
    _check_shapes(metadata, state["model"], ckpt.path)
    dcp.load(state, storage_reader=SafeReader(ckpt.path), planner=SafeLoadPlanner(), process_group=group)
    set_model_state_dict(module, state["model"])
    # how this rank's optimizer steps (fused for plain tensors, not for DTensors) is its own, not the writer's
    kept = [{k: g[k] for k in _IMPLEMENTATION if k in g} for g in optimizer.param_groups]
    set_optimizer_state_dict(module, optimizer, state["optim"], options=StateDictOptions(flatten_optimizer_state_dict=True))
    for g, own in zip(optimizer.param_groups, kept, strict=True):
        g.update(own)


_IMPLEMENTATION = ("fused", "foreach", "capturable", "differentiable")
"""Options of an optimizer's param groups that say how it runs, not what it learned: a checkpoint
written by a rank of plain tensors (fused) must not make a rank of DTensors step fused (refused)."""


def _check_shapes(metadata: Any, model_state: dict[str, Any], path: Path) -> None:
    """:class:`InputError` when a parameter of the model is missing from the checkpoint or has
    another (global) shape there: a checkpoint of another model width or depth."""
    saved = metadata.state_dict_metadata
    for name, value in model_state.items():
        entry = saved.get(f"model.{name}")
        if entry is None:
            raise InputError("checkpoint", str(path), f"has no parameter {name!r} of the model: it was written "
                             "for another model; resume with that model or use another checkpoint_dir")
        size = getattr(entry, "size", None)
        if size is not None and hasattr(value, "shape") and tuple(size) != tuple(value.shape):
            raise InputError("checkpoint", str(path), f"holds {name} of shape {tuple(size)}, the model's is "
                             f"{tuple(value.shape)}: it was written for another model (width); resume with "
                             "that model or use another checkpoint_dir")


def write_manifest(root: str | Path, step: int, num_layers: int, extra: dict[str, Any]) -> Checkpoint:
    """Mark the checkpoint of ``step`` complete (call once every rank has saved): checksums of its files."""
    d = step_dir(root, step)
    files = {p.name: _sha256(p) for p in sorted(d.iterdir()) if p.is_file() and p.name != MANIFEST}
    data = {"step": step, "num_layers": num_layers, "files": files, **extra, "format": MANIFEST_FORMAT}
    data["manifest_sha256"] = _manifest_sha256(data)
    decode(MANIFEST_FILE, data, "manifest")  # what is written reads back (extra: "loss", "plan")
    write_json_atomic(d / MANIFEST, data, root=root)
    return Checkpoint(step, d, data)


def prune(root: str | Path, keep: int) -> None:
    """Delete all but the ``keep`` newest complete checkpoints (and incomplete older ones)."""
    if keep < 1:
        return
    dirs = sorted(Path(root).glob("step-*"))
    complete = [d for d in dirs if (d / MANIFEST).is_file()]
    if len(complete) <= keep:
        return
    cutoff = complete[-keep]
    for d in dirs:
        if d < cutoff:
            shutil.rmtree(d, ignore_errors=True)

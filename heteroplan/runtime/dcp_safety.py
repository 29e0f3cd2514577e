"""Reading a DCP checkpoint without running code from it.

``torch.distributed.checkpoint`` unpickles a checkpoint's ``.metadata`` with plain ``pickle`` and
its non-tensor items (optimizer hyper-parameters) with ``torch.load(weights_only=False)``: a crafted
checkpoint directory runs whatever it likes on resume, and the manifest's checksums (written
beside the files) are no defence. Here the metadata goes through an unpickler that resolves only
the classes DCP metadata is made of, and the non-tensor items through ``weights_only=True``; a
file that names anything else is an :class:`~heteroplan.errors.InputError`, before torch sees it.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint.metadata as dcp_metadata
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.default_planner import (
    DefaultLoadPlanner,
    _EmptyStateDictLoadPlanner,
)

from heteroplan.errors import InputError

__all__ = ["SafeReader", "SafeLoadPlanner", "SafeEmptyLoadPlanner", "read_metadata"]

_METADATA_MODULE = "torch.distributed.checkpoint.metadata"
_ALLOWED = {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),  # maps "torch.strided" to the layout object
    ("collections", "OrderedDict"),
    ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"),
    ("pathlib", "WindowsPath"), ("pathlib", "PureWindowsPath"),
}


class _Forbidden(Exception):
    pass


class _MetadataUnpickler(pickle.Unpickler):
    """Resolves only DCP's metadata classes, torch dtypes and sizes, and paths."""

    def find_class(self, module: str, name: str) -> Any:
        allowed = (module, name) in _ALLOWED
        if module == _METADATA_MODULE:
            cls = getattr(dcp_metadata, name, None)
            allowed = isinstance(cls, type) and cls.__module__ == _METADATA_MODULE
        elif module == "torch":
            allowed = allowed or isinstance(getattr(torch, name, None), torch.dtype)
        if not allowed:
            raise _Forbidden(f"{module}.{name}")
        return super().find_class(module, name)


def read_metadata(path: str | Path) -> dcp_metadata.Metadata:
    """The DCP ``Metadata`` of the file ``path``; one that names any other class or function
    (``os.system``, ``builtins.eval``) or is not a pickle of ``Metadata`` is an :class:`InputError`."""
    try:
        with open(path, "rb") as f:
            data = _MetadataUnpickler(f).load()
    except _Forbidden as exc:
        raise InputError("checkpoint metadata", str(path),
                         f"refers to {exc}, which a DCP checkpoint never holds; refusing to load it "
                         "(it could run code): delete the checkpoint directory") from None
    except OSError as exc:
        raise InputError("checkpoint metadata", str(path), f"cannot read it: {exc.strerror or exc}") from None
    except Exception as exc:  # noqa: BLE001 - any unpickling failure of a damaged file
        raise InputError("checkpoint metadata", str(path), f"is corrupt ({type(exc).__name__}); delete its directory") from None
    if not isinstance(data, dcp_metadata.Metadata):
        raise InputError("checkpoint metadata", str(path), f"holds a {type(data).__name__}, not DCP metadata")
    return data


class SafeReader(FileSystemReader):
    """A ``FileSystemReader`` whose metadata is read by :func:`read_metadata`."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> dcp_metadata.Metadata:
        metadata = read_metadata(self._get_metadata_path(kwargs.get("rank")))
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = dcp_metadata.StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


def _load_bytes_safely(value: io.BytesIO, what: str) -> Any:
    try:
        return torch.load(value, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise InputError("checkpoint item", what, f"is not plain data ({str(exc).splitlines()[0]}); refusing to load it") from None


class SafeLoadPlanner(DefaultLoadPlanner):
    """DCP's load planner, with non-tensor items read by ``torch.load(weights_only=True)``."""

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        obj = _load_bytes_safely(value, read_item.dest_index.fqn)
        super().load_bytes(read_item, _saved(obj))


class SafeEmptyLoadPlanner(_EmptyStateDictLoadPlanner):
    """DCP's load-everything planner (``dcp_to_torch_save``'s), reading non-tensor items safely."""

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        obj = _load_bytes_safely(value, read_item.dest_index.fqn)
        super().load_bytes(read_item, _saved(obj))


def _saved(obj: Any) -> io.BytesIO:
    """``obj`` (already checked to be plain data) saved again for the parent's ``torch.load``."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return buffer

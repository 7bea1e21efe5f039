"""The exported program as a .pt2 archive holding the graph only: no weights, no pickles."""

from __future__ import annotations

import io
import json
import re
import warnings
import zipfile

import torch

from ..capture.export import meta_like, with_tensors
from ..errors import UnsafeArtifactError

# Entries a weightless archive may hold (below its top folder). Anything else (pickled
# sample inputs or constants, custom objects, compiled libraries) is refused unread.
_ALLOWED = re.compile(
    r"(archive_format|archive_version|byteorder|\.data/version|\.data/serialization_id"
    r"|models/[\w.-]+\.json|data/(weights|constants)/[\w.-]+|data/sample_inputs/[\w.-]+)"
)
_CONFIGS = ("data/weights/model_weights_config.json", "data/constants/model_constants_config.json")


def program_bytes(exported: torch.export.ExportedProgram) -> bytes:
    """The program serialized with torch.export.save, its tensors replaced by shapes only.

    The weights go to safetensors instead; meta tensors keep dtype, shape and the
    parameter/buffer distinction, so the archive stays small and free of tensor data.
    """
    weightless = with_tensors(
        exported,
        state_dict={name: _meta_like(t) for name, t in exported.state_dict.items()},
        constants={name: _meta_like(t) for name, t in exported.constants.items()},
    )
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch's own pytree deprecation notices
        torch.export.save(weightless, buffer)
    return buffer.getvalue()


def _meta_like(value: object) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise UnsafeArtifactError(f"the program holds a {type(value).__name__} constant, which cannot be saved safely")
    return meta_like(value)


def check_safe(data: bytes | bytearray | memoryview, name: str) -> None:
    """Raises UnsafeArtifactError unless the archive holds only the graph's JSON and no tensor data."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        entries = archive.infolist()
    except zipfile.BadZipFile as error:
        raise UnsafeArtifactError(f"{name}: not a .pt2 archive ({error})") from error
    for entry in entries:
        inner = entry.filename.split("/", 1)[1] if "/" in entry.filename else entry.filename
        if not _ALLOWED.fullmatch(inner):
            raise UnsafeArtifactError(f"{name}: holds {entry.filename!r}, which a TensorTorrent program never has")
        if inner.startswith("data/") and not inner.endswith(".json") and entry.file_size:
            raise UnsafeArtifactError(f"{name}: {entry.filename!r} holds data; weights come only from safetensors")
        if inner.endswith(tuple(_CONFIGS)):
            _check_config(archive.read(entry), f"{name}: {entry.filename}")


def _check_config(raw: bytes, where: str) -> None:
    try:
        config = json.loads(raw)["config"]
        pickled = [key for key, item in config.items() if item.get("use_pickle", True)]
    except (ValueError, KeyError, AttributeError, TypeError) as error:
        raise UnsafeArtifactError(f"{where}: unreadable tensor table ({error!r})") from error
    if pickled:
        raise UnsafeArtifactError(f"{where}: {pickled[0]!r} is pickled; refusing to unpickle it")


def load_program(data: bytes | bytearray | memoryview, name: str) -> torch.export.ExportedProgram:
    """The program, after check_safe passed; its tensors are meta tensors to be replaced."""
    check_safe(data, name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return torch.export.load(io.BytesIO(bytes(data)))

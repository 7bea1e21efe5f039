"""The exported program as a .pt2 archive holding the graph only: no weights, no pickles."""

from __future__ import annotations

import importlib
import io
import json
import re
import warnings
import zipfile

import torch
import torch.utils._pytree as pytree

from ..capture.export import meta_like, with_tensors
from ..errors import ArtifactError, UnsafeArtifactError, UnsupportedError

# Entries a weightless archive may hold (below its top folder). Anything else (pickled
# sample inputs or constants, custom objects, compiled libraries) is refused unread.
_ALLOWED = re.compile(
    r"(archive_format|archive_version|byteorder|\.data/version|\.data/serialization_id"
    r"|models/[\w.-]+\.json|data/(weights|constants)/[\w.-]+|data/sample_inputs/[\w.-]+)"
)
_CONFIGS = ("data/weights/model_weights_config.json", "data/constants/model_constants_config.json")
# Packages whose output types (transformers' ModelOutput classes) register themselves with
# torch's pytree when their module is imported: a program that names one imports that
# module of the installed package, so an artifact loads without the model's code.
_SELF_REGISTERING = ("transformers",)


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
        try:
            torch.export.save(weightless, buffer)
        except NotImplementedError as error:  # a structure type torch's pytree cannot serialize
            reason = str(error).strip().splitlines()[0]
            raise UnsupportedError(
                f"saving: the model's inputs or outputs hold a type torch.export cannot record ({reason}); "
                "return tuples, lists or dicts of tensors instead"
            ) from error
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
            try:
                raw = archive.read(entry)
            except zipfile.BadZipFile as error:  # a CRC that does not match: read unverified
                raise ArtifactError(f"{name}: damaged archive ({error})") from error
            _check_config(raw, f"{name}: {entry.filename}")


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
    try:
        _register_structure_types(zipfile.ZipFile(io.BytesIO(bytes(data))), name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            return torch.export.load(io.BytesIO(bytes(data)))
    except ArtifactError:
        raise
    except Exception as error:  # a damaged archive fails in many ways (zip CRCs, JSON, torch's schema)
        raise ArtifactError(f"{name}: unreadable program ({type(error).__name__}: {error})") from error


def _register_structure_types(archive: zipfile.ZipFile, name: str) -> None:
    """Makes every type the program's input and output structures name known to torch's
    pytree, which rebuilds them: a self-registering package's module is imported from the
    installed package; any other unknown type is an ArtifactError naming it."""
    known = pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE
    for type_name in sorted(_structure_types(archive) - set(known)):
        module, _, _ = type_name.rpartition(".")
        if module.split(".")[0] in _SELF_REGISTERING:
            try:
                importlib.import_module(module)
            except ImportError as error:
                raise ArtifactError(
                    f"{name}: its outputs are a {type_name}, and {module} cannot be imported ({error})"
                ) from error
        if type_name not in known:
            raise ArtifactError(
                f"{name}: its inputs or outputs are a {type_name}, which this process has not registered with "
                f"torch.utils._pytree: import the module that defines and registers it before loading"
            )


def _structure_types(archive: zipfile.ZipFile) -> set[str]:
    """The type names in the serialized input and output structures (pytree specs) of the
    archive's programs."""
    names: set[str] = set()
    for entry in archive.namelist():
        if entry.split("/", 1)[-1].startswith("models/") and entry.endswith(".json"):
            _collect_spec_types(json.loads(archive.read(entry)), names)
    return names


def _collect_spec_types(value: object, names: set[str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("in_spec", "out_spec") and isinstance(item, str):
                _collect_node_types(json.loads(item)[1], names)
            else:
                _collect_spec_types(item, names)
    elif isinstance(value, list):
        for item in value:
            _collect_spec_types(item, names)


def _collect_node_types(node: dict, names: set[str]) -> None:
    if node.get("type") is not None:
        names.add(node["type"])
    for child in node.get("children_spec", ()):
        _collect_node_types(child, names)

"""tt.quantize_checkpoint: a checkpoint's linear layers written once compressed, a tensor at a time.

A model too large for RAM cannot be loaded to be compressed, so the checkpoint is read
tensor by tensor (holding the largest one and its compressed copy at most) and written
as the checkpoint of the model's compressed copy (compression/model.py): each linear
layer's and embedding's `weight` (int8, or packed int4) and its `weight_scale`, each of a
mixture's stacked expert projections (int8) and its scales under the name with
"_scale", every other tensor as it was, under the model's own names. A later compile of the model (on the meta device)
with the same CompileConfig weight_format (and group_size) and checkpoint= that folder
reads the compressed values in place. The folder also holds `quantization.json` (what wrote it, in which format
version) and the source's `config.json` where it had one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import torch
from torch import nn

from ..config import GROUP_SIZES, WEIGHT_FORMATS
from ..errors import CheckpointError, InvalidArgumentError
from ..files import write_text_atomically
from ..observe.progress import CompileProgress
from ..storage.checkpoint import Checkpoint, as_path, open_checkpoint, read_tensor
from ..storage.name_matching import match_checkpoint
from ..storage.safetensors_file import write_safetensors
from .accuracy import NOT_MEASURED_FROM_CHECKPOINT
from .int4_linear import ROW_BLOCKS, stored_rows_per_block
from .int8_experts import expert_rows, quantize_stacked, stacked_experts
from .int8_linear import dequantized_int8
from .model import COMPRESSED_MODULES, compressed_layer, compressed_model

RECORD = "quantization.json"
RECORD_VERSION = 1
WEIGHTS = "model.safetensors"


def quantize_checkpoint(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    weight_format: str = "int8",
    *,
    group_size: int = 128,
    model: nn.Module | None = None,
) -> str:
    """Writes folder `dst` (new, or empty) holding `src`'s checkpoint with its linear layers
    in `weight_format` ("int8", or "int4" in groups of `group_size` inputs, as
    CompileConfig takes them); returns its path. `model` says which tensors are linear
    layers (build it on the meta device); None builds it from the `config.json` of a
    Hugging Face folder `src` (transformers' class named in its `architectures`).
    Nothing is left at `dst` when it fails."""
    if weight_format not in WEIGHT_FORMATS:
        expected = " or ".join(map(repr, WEIGHT_FORMATS))
        raise InvalidArgumentError(f"quantize_checkpoint: weight_format: expected {expected}, got {weight_format!r}")
    if group_size not in GROUP_SIZES:
        expected = ", ".join(map(str, GROUP_SIZES))
        raise InvalidArgumentError(f"quantize_checkpoint: group_size: expected one of {expected}, got {group_size!r}")
    target = as_path(dst, "quantize_checkpoint: dst")
    if os.path.exists(target) and not (os.path.isdir(target) and not os.listdir(target)):
        raise InvalidArgumentError(f"quantize_checkpoint: dst {target}: expected a new or empty folder")
    checkpoint = open_checkpoint(src)
    source_folder = _folder_of(as_path(src, "quantize_checkpoint: src"))
    model = model if model is not None else model_of_folder(source_folder)
    parent = os.path.dirname(os.path.abspath(target))
    os.makedirs(parent, exist_ok=True)
    partial = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}-", suffix=".partial", dir=parent)
    try:
        with CompileProgress(["quantize"]) as progress, progress.stage("quantize"):
            layers, errors = _write_compressed(
                model, checkpoint, os.path.join(partial, WEIGHTS), weight_format, group_size
            )
        record = {"format": "tensortorrent.weight_format", "version": RECORD_VERSION, "weight_format": weight_format}
        record.update(group_size=group_size, rows_per_block=stored_rows_per_block(), layers=layers)
        if errors:
            record["weight_error"] = {"tables": len(errors), "largest": max(errors), "mean": sum(errors) / len(errors)}
        write_text_atomically(os.path.join(partial, RECORD), json.dumps(record, indent=1) + "\n", "quantize_checkpoint")
        config = os.path.join(source_folder, "config.json") if source_folder else None
        if config and os.path.isfile(config):
            shutil.copyfile(config, os.path.join(partial, "config.json"))
        if os.path.isdir(target):
            os.rmdir(target)
        os.rename(partial, target)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return target


def _write_compressed(
    model: nn.Module, checkpoint, path: str, weight_format: str, group_size: int
) -> tuple[int, list[float]]:
    """Writes the compressed copy of `model`'s tensors, read from `checkpoint`; returns
    how many modules (linear layers, embeddings, stacked experts) are compressed, and
    each compressed table's relative error (relative_error)."""
    float_names = _names_by_tensor(model)
    expected = {name: (t.dtype, tuple(t.shape)) for names, t in float_names for name in names}
    tied = {name: names[0] for names, _ in float_names for name in names[1:]}
    matched = match_checkpoint(expected, checkpoint, tied)
    compressed = compressed_model(model, weight_format, group_size)
    # Each compressed module's format (an embedding no head shares is int8 under "int4").
    formats = {
        path: "int4" if getattr(m, "group_size", None) else "int8"
        for path, m in compressed.named_modules(remove_duplicate=False)
        if isinstance(m, COMPRESSED_MODULES)
    }
    transposed = {path for path in formats if type(model.get_submodule(path)).__name__ == "Conv1D"}
    done: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # table -> its values and scale, until both are written
    errors: list[float] = []

    def value_of(name: str) -> torch.Tensor:
        layer, _, attribute = name.rpartition(".")
        if layer not in formats or attribute == "bias":
            return read_tensor(matched[name])
        table = f"{layer}.{attribute.removesuffix('_scale')}"  # "weight", or an expert projection's name
        if table not in done:
            weight = read_tensor(matched[table])
            source = model.get_submodule(layer)
            if stacked_experts(source):
                rows = expert_rows(weight, source.is_transposed)
                done[table] = quantize_stacked(rows)
                errors.append(relative_error(rows, dequantized_int8(*done[table])))
            else:
                rows = weight.t() if layer in transposed else weight
                compressed_table = compressed_layer(rows, None, formats[layer], group_size)
                done[table] = (compressed_table.weight.detach(), compressed_table.weight_scale.detach())
                errors.append(relative_error(rows, compressed_table.float_weight()))
        if not attribute.endswith("_scale"):
            return done[table][0]
        return done.pop(table)[1]  # written after the larger values (largest first)

    placeholders = {names[0]: t for names, t in _names_by_tensor(compressed)}
    write_safetensors(placeholders, path, value_of)
    return len(formats), errors


def relative_error(weight: torch.Tensor, restored: torch.Tensor) -> float:
    """How far the weight a compressed table stands for is from the float one: the norm of
    the difference over the weight's (Frobenius, in float64)."""
    weight = weight.detach().double()
    return ((restored.double() - weight).norm() / weight.norm().clamp(min=torch.finfo(torch.float64).tiny)).item()


def _names_by_tensor(model: nn.Module) -> list[tuple[list[str], torch.Tensor]]:
    """Each saved tensor of `model` once, with all its names (tied weights share one)."""
    groups: dict[int, tuple[list[str], torch.Tensor]] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        groups.setdefault(id(tensor), ([], tensor))[0].append(name)
    return list(groups.values())


def _folder_of(path: str) -> str | None:
    if os.path.isdir(path):
        return path
    return os.path.dirname(path) if os.path.exists(path) else None


def model_of_folder(folder: str | None) -> nn.Module:
    """The meta-device model a Hugging Face checkpoint folder's config.json describes."""
    config = os.path.join(folder, "config.json") if folder else None
    if config is None or not os.path.isfile(config):
        raise InvalidArgumentError(
            "quantize_checkpoint: which tensors are linear layers comes from a model: pass model= (built on the "
            f"meta device), or a Hugging Face folder with a config.json (got {folder or 'no folder'})"
        )
    try:
        import transformers
    except ImportError as error:
        raise InvalidArgumentError(
            f"quantize_checkpoint: {config}: reading it needs transformers (pip install transformers), or pass model="
        ) from error
    settings = transformers.AutoConfig.from_pretrained(folder)
    names = getattr(settings, "architectures", None) or []
    cls = getattr(transformers, names[0], None) if names else None
    if cls is None:
        raise InvalidArgumentError(
            f"quantize_checkpoint: {config}: expected an 'architectures' entry naming a transformers class, "
            f"got {names!r}; pass model="
        )
    with torch.device("meta"):
        return cls(settings).eval()


def compressed_for(
    model: nn.Module, weight_format: str | None, group_size: int, checkpoint: Checkpoint | None
) -> nn.Module:
    """`model`'s copy in `weight_format` (compressed_model); with `checkpoint` (opened),
    which must hold that format (check_compressed), the copy takes the int4 layout the
    checkpoint was written in."""
    if checkpoint is None or weight_format is None:
        return compressed_model(model, weight_format, group_size)
    rows_per_block = check_compressed(checkpoint.files, weight_format, group_size)
    return compressed_model(model, weight_format, group_size, rows_per_block)


def check_compressed(checkpoint_files: tuple[str, ...], weight_format: str, group_size: int) -> int:
    """The block of rows of the int4 layout quantize_checkpoint wrote these files in;
    CheckpointError unless it wrote them in `weight_format` (and, for int4, `group_size`:
    its record beside them), in a format version this release reads."""
    folder = os.path.dirname(checkpoint_files[0])
    record = _record(folder)
    if record.get("weight_format") != weight_format:
        holds = f"{record.get('weight_format')!r} weights" if record else "float weights (no quantization.json)"
        raise CheckpointError(
            f"checkpoint {folder}: weight_format={weight_format!r} reads a checkpoint holding the {weight_format} "
            f"layers, this one holds {holds}: write one once with tt.quantize_checkpoint(src, dst, "
            f"weight_format={weight_format!r}) or `tensortorrent quantize SRC DST`"
        )
    if weight_format == "int4" and record.get("group_size") != group_size:
        recorded = record.get("group_size")
        raise CheckpointError(
            f"checkpoint {folder}: group_size={group_size} reads int4 in groups of {group_size}; this checkpoint "
            f"holds groups of {recorded}: pass CompileConfig(group_size={recorded})"
        )
    if record.get("version", 0) > RECORD_VERSION:
        raise CheckpointError(
            f"{os.path.join(folder, RECORD)}: format version {record['version']} needs a newer tensortorrent "
            f"(this one reads versions up to {RECORD_VERSION})"
        )
    rows_per_block = record.get("rows_per_block", max(ROW_BLOCKS))  # the first ones: written on AVX-512
    if rows_per_block not in ROW_BLOCKS:
        raise CheckpointError(
            f"{os.path.join(folder, RECORD)}: rows_per_block {rows_per_block!r}, expected one of {ROW_BLOCKS}"
        )
    return rows_per_block


def _record(folder: str) -> dict:
    """The quantization.json quantize_checkpoint wrote in `folder`; {} where there is none."""
    try:
        with open(os.path.join(folder, RECORD), encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{os.path.join(folder, RECORD)}: unreadable ({error})") from error


def checkpoint_accuracy(checkpoint_files: tuple[str, ...]) -> str:
    """explain()'s accuracy line for a compile from a compressed checkpoint: its outputs
    cannot be compared with the float model's, which it does not hold; what
    quantize_checkpoint measured of its tables when it wrote them, where it did."""
    error = _record(os.path.dirname(checkpoint_files[0])).get("weight_error")
    if not isinstance(error, dict) or not {"tables", "largest", "mean"} <= error.keys():
        return NOT_MEASURED_FROM_CHECKPOINT
    return (
        f"{NOT_MEASURED_FROM_CHECKPOINT}; its {error['tables']} tables' relative weight error when written: "
        f"largest {error['largest']:.3g}, mean {error['mean']:.3g}"
    )

"""A generative module's artifact: each of its programs beside one weights file.

manifest.json describes the module (format GENERATION_FORMAT): its GenerationSpec and its
programs. Each program has its own artifact manifest (NAME.manifest.json) and archive
(NAME.pt2), whose weights tables name tensors of the one weights.safetensors, so the
weights are written once and loaded once. The KV cache is not written: its buffers are
listed with their shapes, and loading makes them zeros (every position is written before
a token attends to it). A tokenizer saved with it (save_pretrained's files) is what
serving encodes and decodes text with."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from ..errors import ArtifactError, InvalidArgumentError
from ..storage.safetensors_file import DTYPE_NAMES, save_weights
from ..version import __version__
from .integrity import write_integrity
from .layout import GENERATION_FORMAT, GENERATION_FORMAT_VERSION, MANIFEST, WEIGHTS
from .publish import publish_directory
from .save import check_save_arguments, write_program
from .weight_references import reference_files

if TYPE_CHECKING:
    from ..runtime.compiled_module import ArtifactParts

DECODE = 1  # the decode program's length: one token per row


def program_name(length: int) -> str:
    """A program's name in the artifact (its files are NAME.manifest.json and NAME.pt2)."""
    return "decode" if length == DECODE else f"prefill-{length}"


def save_generation(
    spec: dict[str, Any],
    programs: dict[int, ArtifactParts],
    path: str | os.PathLike,
    weights: str = "copy",
    tokenizer: object = None,
) -> str:
    """Writes the artifact of a generative module (its spec as JSON, its programs' parts
    by length) at `path`, atomically; returns the path. `weights` as CompiledModule.save
    takes it; `tokenizer`: anything with save_pretrained(directory) (a transformers tokenizer)."""
    decode = programs[DECODE]
    by_reference = check_save_arguments(decode, path, weights)
    if tokenizer is not None and not callable(getattr(tokenizer, "save_pretrained", None)):
        raise InvalidArgumentError(
            "save: tokenizer: expected a tokenizer with save_pretrained() (transformers'), "
            f"got {type(tokenizer).__name__}"
        )
    bound = decode.program.bound
    cache = [b for b in bound if b.slot in decode.program.mutated_slots]
    shared = [b for b in bound if b.slot not in decode.program.mutated_slots]

    def write(directory: str) -> None:
        entries = save_weights(shared, os.path.join(directory, WEIGHTS), decode.weights_on_disk, by_reference)
        entries += [{"key": b.names[0], "names": list(b.names), "kind": b.kind, "requires_grad": False} for b in cache]
        by_name = {name: entry for entry in entries for name in entry["names"]}
        files = reference_files(decode.weights_on_disk) if by_reference else None
        listed = []
        for length, parts in sorted(programs.items()):
            name = program_name(length)
            table = _weights_table(parts, by_name, name)
            write_program(parts, directory, table, files, f"{name}.manifest.json", f"{name}.pt2")
            listed.append({"length": length, "manifest": f"{name}.manifest.json"})
        manifest = {
            "format": GENERATION_FORMAT,
            "format_version": GENERATION_FORMAT_VERSION,
            "tensortorrent": __version__,
            "spec": spec,
            "programs": listed,
            "cache_buffers": [
                {"key": b.names[0], "shape": list(b.tensor.shape), "dtype": DTYPE_NAMES[b.tensor.dtype]} for b in cache
            ],
            "tokenizer": tokenizer is not None,
        }
        with open(os.path.join(directory, MANIFEST), "w", encoding="utf-8") as handle:
            json.dump(manifest, handle, indent=2)
        if tokenizer is not None:
            tokenizer.save_pretrained(directory)
        write_integrity(directory, _plain_files(directory))

    return publish_directory(os.fspath(path), write)


def _weights_table(parts: ArtifactParts, by_name: dict[str, dict], name: str) -> list[dict]:
    """A program's weights table: its bound tensors under its own names, each the decode
    program's entry (every program binds the same module's tensors)."""
    table = []
    for tensor in parts.program.bound:
        entry = next((by_name[n] for n in tensor.names if n in by_name), None)
        if entry is None:
            raise ArtifactError(f"save: the {name} program binds {tensor.names[0]!r}; the decode program does not")
        table.append({**entry, "names": list(tensor.names)})
    return table


def _plain_files(directory: str) -> list[str]:
    """The files written (a tokenizer's among them); ArtifactError on a subdirectory, which an artifact cannot hold."""
    names = []
    for entry in os.scandir(directory):
        if not entry.is_file(follow_symlinks=False):
            raise ArtifactError(f"save: {entry.name} is not a plain file (a tokenizer wrote a directory?)")
        names.append(entry.name)
    return names

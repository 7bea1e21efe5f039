"""compiled.save(dir): the manifest, the weightless program, the weights, the digests."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import torch

from ..errors import InvalidArgumentError
from ..hardware import hardware_fingerprint
from ..planning import plan_to_json
from ..storage.safetensors_file import save_weights
from ..version import __version__
from .compressed_entry import FIELD as COMPRESSED_FIELD
from .compressed_entry import compressed_entry
from .devices import device_entries
from .integrity import write_integrity
from .layout import FORMAT, FORMAT_VERSION, MANIFEST, PROGRAM, WEIGHTS
from .program_archive import program_bytes
from .publish import publish_directory
from .weight_references import reference_files

if TYPE_CHECKING:  # what a compiled module hands over to be saved; the runtime calls this module
    from ..runtime.compiled_module import ArtifactParts


def save_compiled(parts: ArtifactParts, path: str | os.PathLike, weights: str = "copy") -> str:
    """Writes a compiled module's parts (compiled.artifact_parts()) as an artifact directory
    at `path`, atomically; returns the path. `weights`: "copy" writes them into the
    artifact; "reference" records the files they are read from instead (weight_references.py)."""
    by_reference = check_save_arguments(parts, path, weights)
    on_disk = parts.weights_on_disk
    parts.signature.to_json()  # fails early, before any file is written, on inputs an artifact cannot hold

    def write(directory: str) -> None:
        # Weights left on disk (a checkpoint's, a loaded artifact's) are copied a tensor at a time.
        entries = save_weights(parts.program.bound, os.path.join(directory, WEIGHTS), on_disk, by_reference)
        write_program(parts, directory, entries, reference_files(on_disk) if by_reference else None)
        write_integrity(directory, [MANIFEST, PROGRAM, WEIGHTS])

    return publish_directory(os.fspath(path), write)


def check_save_arguments(parts: ArtifactParts, path: object, weights: object) -> bool:
    """Whether the weights are saved by reference; InvalidArgumentError on a bad argument."""
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgumentError(f"save: path: expected a str or os.PathLike, got {type(path).__name__}")
    if weights not in ("copy", "reference"):
        raise InvalidArgumentError(f"save: weights: expected 'copy' or 'reference', got {weights!r}")
    if weights == "reference" and parts.weights_on_disk is None:
        raise InvalidArgumentError(
            "save: weights='reference' needs weights read from files (a module compiled from a checkpoint, "
            "or loaded with a RAM budget); this module's weights are in memory: save them with weights='copy'"
        )
    return weights == "reference"


def write_program(
    parts: ArtifactParts,
    directory: str,
    weights: list[dict],
    weight_files: list[dict] | None,
    manifest_name: str = MANIFEST,
    program_name: str = PROGRAM,
) -> None:
    """Writes one program's archive and its manifest, whose weights table (`weights`, as
    save_weights returned it) names tensors of the directory's weights file."""
    with open(os.path.join(directory, program_name), "wb") as handle:
        handle.write(program_bytes(parts.program.exported))
    manifest = _manifest(parts, parts.signature.to_json(), weights, program_name)
    if weight_files is not None:
        manifest["weight_files"] = weight_files
    compressed = compressed_entry(parts.config, parts.accuracy_note)
    if compressed is not None:
        manifest[COMPRESSED_FIELD] = compressed
    with open(os.path.join(directory, manifest_name), "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=2)


def _manifest(parts: ArtifactParts, signature: dict, weights: list[dict], program_name: str) -> dict[str, Any]:
    decisions, schedule = plan_to_json(parts.plan)
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "tensortorrent": __version__,
        "torch": torch.__version__,
        "hardware_fingerprint": hardware_fingerprint(),
        "model_name": parts.model_name,
        "config": parts.config.as_dict(),
        "signature": signature,
        "files": {"program": program_name, "weights": WEIGHTS},
        "weights": weights,
        "regions": [
            {
                "index": region.index,
                "layer": region.layer,
                "operations": [node.name for node in region.nodes],
                "deps": region.deps,
                "parameter_bytes": region.parameter_bytes,
            }
            for region in parts.regions
        ],
        "devices": device_entries(parts.plan),
        "plan": decisions,
        "schedule": schedule,
        # Per region: FLOPs and output bytes from the graph, CPU seconds measured at compile.
        "predicted_costs": {"regions": [vars(cost) for cost in parts.region_costs]},
        # What each region ran: the choice only; inductor's code is compiled again on load.
        "region_backends": [choice.to_json() for choice in parts.region_backends.choices],
    }

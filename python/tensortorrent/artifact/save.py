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
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgumentError(f"save: path: expected a str or os.PathLike, got {type(path).__name__}")
    if weights not in ("copy", "reference"):
        raise InvalidArgumentError(f"save: weights: expected 'copy' or 'reference', got {weights!r}")
    on_disk = parts.weights_on_disk
    by_reference = weights == "reference"
    if by_reference and on_disk is None:
        raise InvalidArgumentError(
            "save: weights='reference' needs weights read from files (a module compiled from a checkpoint, "
            "or loaded with a RAM budget); this module's weights are in memory: save them with weights='copy'"
        )
    program = parts.program
    signature = parts.signature.to_json()  # fails early on inputs an artifact cannot hold
    pt2 = program_bytes(program.exported)

    def write(directory: str) -> None:
        with open(os.path.join(directory, PROGRAM), "wb") as handle:
            handle.write(pt2)
        # Weights left on disk (a checkpoint's, a loaded artifact's) are copied a tensor at a time.
        entries = save_weights(program.bound, os.path.join(directory, WEIGHTS), on_disk, by_reference)
        manifest = _manifest(parts, signature, entries)
        if by_reference:
            manifest["weight_files"] = reference_files(on_disk)
        with open(os.path.join(directory, MANIFEST), "w", encoding="utf-8") as handle:
            json.dump(manifest, handle, indent=2)
        write_integrity(directory, [MANIFEST, PROGRAM, WEIGHTS])

    return publish_directory(os.fspath(path), write)


def _manifest(parts: ArtifactParts, signature: dict, weights: list[dict]) -> dict[str, Any]:
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
        "files": {"program": PROGRAM, "weights": WEIGHTS},
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

"""The artifact directory: its files and the manifest's schema."""

from __future__ import annotations

import os
from typing import Any

from ..errors import ArtifactError

FORMAT = "tensortorrent-artifact"
FORMAT_VERSION = 1  # bump when a reader of the previous version could misread the files
GENERATION_FORMAT = "tensortorrent-generation"  # a generative module: its programs beside one weights file
GENERATION_FORMAT_VERSION = 1

MANIFEST = "manifest.json"
INTEGRITY = "integrity.json"
PROGRAM = "program.pt2"
WEIGHTS = "weights.safetensors"

# Every key the manifest must have, with the type its value must be.
MANIFEST_FIELDS: dict[str, type | tuple[type, ...]] = {
    "format": str,
    "format_version": int,
    "tensortorrent": str,
    "torch": str,
    "hardware_fingerprint": dict,
    "model_name": str,
    "config": dict,
    "signature": dict,
    "files": dict,
    "weights": list,
    "regions": list,
    "plan": dict,
    "schedule": list,
    "predicted_costs": (dict, type(None)),
}


def check_manifest(manifest: object, name: str = MANIFEST) -> dict[str, Any]:
    """The manifest (read from file `name`), or ArtifactError naming the first missing or
    mistyped field."""
    if not isinstance(manifest, dict):
        raise ArtifactError(f"{name}: expected a JSON object, got {type(manifest).__name__}")
    if manifest.get("format") != FORMAT:
        raise ArtifactError(f"{name}: expected format {FORMAT!r}, got {manifest.get('format')!r}")
    version = manifest.get("format_version")
    if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
        raise ArtifactError(
            f"{name}: artifact format version {version} needs a newer tensortorrent "
            f"(this one reads versions up to {FORMAT_VERSION})"
        )
    for field, expected in MANIFEST_FIELDS.items():
        if field not in manifest:
            raise ArtifactError(f"{name}: missing field {field!r}")
        value = manifest[field]
        if not isinstance(value, expected) or isinstance(value, bool):  # no field is a bool
            raise ArtifactError(
                f"{name}: field {field!r} has type {type(value).__name__}, expected {_type_names(expected)}"
            )
    for role in ("program", "weights"):
        check_file_name(manifest["files"].get(role), f"{name} files[{role!r}]")
    return manifest


def check_file_name(name: object, where: str) -> str:
    """A plain file name inside the artifact, or ArtifactError: no paths that escape it."""
    if not isinstance(name, str) or not name or name in (".", "..") or os.sep in name or "/" in name:
        raise ArtifactError(f"{where}: expected a file name inside the artifact directory, got {name!r}")
    return name


def _type_names(expected: type | tuple[type, ...]) -> str:
    types = expected if isinstance(expected, tuple) else (expected,)
    return " or ".join("null" if t is type(None) else t.__name__ for t in types)

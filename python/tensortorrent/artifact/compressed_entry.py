"""The manifest's entry on compressed weights (CompileConfig.weight_format), versioned.

The weights file holds the packed integers and their scales under the layers' names, and
the program the ops that compute from them (with their group size and int4 layout); the
entry says which format they are in and keeps the accuracy measured at compile, so that
a loaded module's explain() reports it too.
"""

from __future__ import annotations

from typing import Any

from ..config import CompileConfig
from ..errors import ArtifactError

FIELD = "compressed_weights"
VERSION = 1  # bump when a reader of the previous version could misread the entry


def compressed_entry(config: CompileConfig, accuracy_note: str | None) -> dict[str, Any] | None:
    """The entry for a module compiled with `config`; None where its weights are not compressed."""
    if config.weight_format is None:
        return None
    return {
        "version": VERSION,
        "weight_format": config.weight_format,
        "group_size": config.group_size,
        "accuracy": accuracy_note,
    }


def saved_accuracy(manifest: dict[str, Any], name: str) -> str | None:
    """The accuracy the entry of `manifest` (file `name`) kept; None without an entry;
    ArtifactError for an entry this release cannot read."""
    entry = manifest.get(FIELD)
    if entry is None:
        return None
    version = entry.get("version") if isinstance(entry, dict) else None
    if not isinstance(version, int) or isinstance(version, bool):
        raise ArtifactError(f"{name}: field {FIELD!r}: expected an object with an integer 'version', got {entry!r}")
    if version > VERSION:
        raise ArtifactError(
            f"{name}: {FIELD} version {version} needs a newer tensortorrent (this one reads versions up to {VERSION})"
        )
    accuracy = entry.get("accuracy")
    if accuracy is not None and not isinstance(accuracy, str):
        raise ArtifactError(f"{name}: {FIELD}['accuracy']: expected a string or null, got {type(accuracy).__name__}")
    return accuracy

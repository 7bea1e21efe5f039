"""An artifact's weights file read once for loading: its tensors by key (views of the
bytes read, or meta tensors where the weights stream from the file), and where each
program's bound tensors lie on disk when they stream or are referenced."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..artifact.layout import MANIFEST
from ..artifact.weight_references import checked_files, referenced_range, referenced_weights
from ..errors import ArtifactError
from ..planning.weights_on_disk import WeightFile, WeightsOnDisk
from ..runtime.streamed_weights import meta_tensors, weights_file
from ..storage.safetensors_file import read_range, tensors_from_safetensors
from .files import ArtifactFiles


@dataclass
class ArtifactWeights:
    tensors: dict[str, torch.Tensor]  # by the weights table's keys
    name: str  # the artifact's weights file
    streaming: bool
    referenced: tuple[WeightFile, ...] | None = None  # the checkpoint files, where saved by reference
    header: object = field(default=None, repr=False)  # the weights file's, where it streams

    @classmethod
    def read(cls, files: ArtifactFiles, manifest: dict, streaming: bool) -> ArtifactWeights:
        """Reads the weights that `manifest` (an artifact manifest) names. `streaming`: the
        weights stay on disk (a RAM budget was given); otherwise they are read whole."""
        name = manifest["files"]["weights"]
        if "weight_files" in manifest:  # saved with weights="reference"
            # The artifact's own file holds only what the checkpoint lacks (computed buffers).
            referenced = checked_files(manifest["weight_files"], files.records is not None)
            tensors = tensors_from_safetensors(files.read(name), name)
            tensors.update(_referenced_tensors(manifest["weights"], referenced, in_memory=not streaming))
            return cls(tensors, name, streaming, referenced=referenced)
        if streaming:
            files.check_present(name)
            header, tensors = meta_tensors(files.path(name))
            return cls(tensors, name, streaming, header=header)
        return cls(tensors_from_safetensors(files.read(name), name), name, streaming)

    def on_disk(self, files: ArtifactFiles, entries: list, program) -> WeightsOnDisk | None:
        """Where `program`'s bound tensors lie on disk (its weights table: `entries`), where
        they stream or are referenced; None where they are all in memory."""
        if self.referenced is not None:
            return referenced_weights(entries, program, self.referenced) if self.streaming else None
        if not self.streaming:
            return None
        return weights_file(files.path(self.name), self.header, entries, program, files.record(self.name))

    def verify(self, files: ArtifactFiles) -> bool:
        """Whether the streamed weights file's chunk digests are to be checked once, before
        its first read (referenced files were checked already)."""
        return self.streaming and self.referenced is None and files.records is not None


def _referenced_tensors(entries: list, files: tuple[WeightFile, ...], in_memory: bool) -> dict[str, torch.Tensor]:
    """The referenced tensors by key: read from their files (each read checked against its
    CRC-32C), or meta tensors where they stream."""
    tensors = {}
    for entry in entries:
        if isinstance(entry, dict) and "reference" in entry:
            place = referenced_range(entry)
            if place.file >= len(files):
                raise ArtifactError(f"{MANIFEST}: {entry['key']!r} names weights file {place.file} of {len(files)}")
            if in_memory:
                tensors[entry["key"]] = read_range(WeightsOnDisk(files, {}), place, entry["key"])
            else:
                tensors[entry["key"]] = torch.empty(place.shape, dtype=place.dtype, device="meta")
    return tensors

"""A program's saved tensors located in a checkpoint: the file ranges its weights stream from."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from .. import core
from ..planning.weights_on_disk import WeightFile, WeightRange, WeightsOnDisk, identity_if_intact
from .checkpoint import Checkpoint
from .name_matching import match_checkpoint

if TYPE_CHECKING:  # a type read here; capture builds on storage
    from ..capture.program import NormalizedProgram


def weights_in_checkpoint(program: NormalizedProgram, checkpoint: Checkpoint) -> WeightsOnDisk:
    """Where each of the program's saved tensors (its state_dict: parameters and persistent
    buffers) lies in the checkpoint, matched by name (see name_matching); raises
    CheckpointError listing what is missing, unexpected or of another dtype or shape. A
    tied weight may be saved under any one of its names. Other bound tensors (constants)
    have no range: they stay the program's own."""
    saved = [bound for bound in program.bound if bound.names[0] in program.exported.state_dict]
    expected = {name: (bound.tensor.dtype, tuple(bound.tensor.shape)) for bound in saved for name in bound.names}
    tied: dict[str, str] = {}
    for bound in saved:
        for name, other in zip(bound.names, bound.names[1:] + bound.names[:1]):
            if name != other:
                tied[name] = other
    matched = match_checkpoint(expected, checkpoint, tied)
    file_index = {path: index for index, path in enumerate(checkpoint.files)}
    ranges = {}
    for bound in saved:
        tensor = matched[bound.names[0]]
        ranges[bound.slot] = WeightRange(
            offset=tensor.offset,
            nbytes=tensor.nbytes,
            dtype=tensor.dtype,
            shape=tensor.shape,
            file=file_index[tensor.path],
        )
    sizes = checkpoint.file_sizes()
    files = tuple(WeightFile(path=path, size=sizes[path]) for path in checkpoint.files)
    return WeightsOnDisk(files=files, ranges=ranges)


CHECKSUM_CHUNK_BYTES = 16 << 20


def with_checksums(weights: WeightsOnDisk, budget_bytes: int) -> WeightsOnDisk:
    """`weights` with every range's CRC-32C, read now a chunk at a time (at most
    CHECKSUM_CHUNK_BYTES, and an eighth of `budget_bytes`, in memory), and each file's
    identity where nothing wrote it meanwhile. A later load of a range checks its bytes
    unless its file still has that identity, so a checkpoint changed after compile fails
    that load (tt.DataCorruptionError naming the file) instead of running on other weights."""
    chunk = torch.empty(max(4096, min(CHECKSUM_CHUNK_BYTES, budget_bytes // 8)), dtype=torch.uint8)
    io = core.IoEngine(threads=2, queue_depth=2)
    ranges, files = {}, []
    for index, file in enumerate(weights.files):
        before = core.file_identity(file.path)
        in_file = sorted((item for item in weights.ranges.items() if item[1].file == index), key=lambda i: i[1].offset)
        for slot, place in in_file:
            crc, done = 0, 0
            while done < place.nbytes:
                piece = chunk[: min(chunk.numel(), place.nbytes - done)]
                io.read_into(file.path, place.offset + done, piece)
                crc = core.crc32c(piece, crc)
                done += piece.numel()
            ranges[slot] = replace(place, crc32c=crc)
        files.append(replace(file, verified_as=identity_if_intact(file.path, before)))
    return replace(weights, files=tuple(files), ranges=ranges)

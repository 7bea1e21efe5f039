"""Weights saved by reference (`compiled.save(dir, weights="reference")`): the artifact records
the checkpoint files its weights are read from (path, size, a SHA-256 per chunk) and each
tensor's range there, instead of a copy; loading checks the files before it trusts them."""

from __future__ import annotations

import os
from typing import Any

from ..errors import ArtifactError
from ..planning.weights_on_disk import WeightFile, WeightRange, WeightsOnDisk
from ..storage.file_digests import chunk_digests, digest_file
from ..storage.safetensors_file import SAFETENSORS_DTYPES


def reference_files(on_disk: WeightsOnDisk) -> list[dict[str, Any]]:
    """The manifest's record of every file the weights are read from (each read whole, a
    piece at a time, for its chunk digests)."""
    records = []
    for file in on_disk.files:
        digest = digest_file(file.path)
        records.append(
            {"path": file.path, "size": digest["size"], "chunk_size": digest["chunk_size"], "chunks": digest["chunks"]}
        )
    return records


def checked_files(records: object, verify: bool) -> tuple[WeightFile, ...]:
    """The referenced files, each checked to be there with its recorded size and, with
    `verify`, its chunk digests: ArtifactError naming the file otherwise."""
    if not isinstance(records, list):
        raise ArtifactError(f"manifest.json: weight_files: expected a list, got {type(records).__name__}")
    files = []
    for record in records:
        try:
            path, size, chunk, chunks = record["path"], int(record["size"]), int(record["chunk_size"]), record["chunks"]
        except (KeyError, TypeError, ValueError) as error:
            raise ArtifactError(f"manifest.json: malformed weight_files entry ({error!r})") from error
        if not os.path.isfile(path):
            raise ArtifactError(f"{path}: a weights file this artifact references is gone (moved or deleted)")
        found = os.path.getsize(path)
        if found != size:
            raise ArtifactError(f"{path}: a referenced weights file changed: {found} bytes, {size} when saved")
        if verify:
            for index, (_, digest) in enumerate(chunk_digests(path, chunk)):
                if index >= len(chunks) or digest != chunks[index]:
                    raise ArtifactError(
                        f"{path}: a referenced weights file changed: chunk {index} (bytes from {index * chunk}) "
                        "fails its sha256 digest"
                    )
        files.append(WeightFile(path=path, size=size, chunk_bytes=chunk, chunk_sha256=tuple(chunks)))
    return tuple(files)


def referenced_range(entry: dict) -> WeightRange:
    """A manifest entry's range in its referenced file, with the CRC-32C every read checks."""
    try:
        place = entry["reference"]
        return WeightRange(
            offset=int(place["offset"]),
            nbytes=int(place["nbytes"]),
            dtype=SAFETENSORS_DTYPES[place["dtype"]],
            shape=tuple(int(d) for d in place["shape"]),
            crc32c=int(entry.get("crc32c", -1)),
            file=int(place["file"]),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise ArtifactError(
            f"manifest.json: malformed weights reference of {entry.get('key')!r} ({error!r})"
        ) from error


def referenced_weights(entries: list[dict], program, files: tuple[WeightFile, ...]) -> WeightsOnDisk:
    """Where each of `program`'s referenced bound tensors lies; the others stay its own."""
    recorded = {name: entry for entry in entries if "reference" in entry for name in entry["names"]}
    ranges = {b.slot: referenced_range(recorded[b.names[0]]) for b in program.bound if b.names[0] in recorded}
    return WeightsOnDisk(files=files, ranges=ranges)

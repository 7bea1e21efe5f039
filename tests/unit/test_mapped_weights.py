"""Weights mapped from their file: the bytes as written, checked once, known to the planner as mapped."""

from __future__ import annotations

import pytest
import torch

from tensortorrent.errors import StorageError
from tensortorrent.planning.weights_on_disk import WeightFile, WeightRange, WeightsOnDisk
from tensortorrent.storage.mapped_weights import is_mapped, map_range
from tensortorrent.storage.safetensors_file import tensor_crc32c

TABLE = torch.arange(64 * 16, dtype=torch.float32).reshape(64, 16)


def table_file(tmp_path, offset: int = 4096) -> tuple[WeightsOnDisk, WeightRange]:
    path = tmp_path / "weights.bin"
    path.write_bytes(bytes(offset) + TABLE.numpy().tobytes() + bytes(100))
    place = WeightRange(offset, TABLE.nbytes, torch.float32, tuple(TABLE.shape), crc32c=tensor_crc32c(TABLE))
    return WeightsOnDisk((WeightFile(str(path), path.stat().st_size),), {0: place}), place


def test_a_mapped_range_holds_the_files_bytes_and_is_known_as_mapped(tmp_path):
    on_disk, place = table_file(tmp_path)
    mapped = map_range(on_disk, place, "table")
    assert torch.equal(mapped, TABLE)
    assert torch.equal(torch.nn.functional.embedding(torch.tensor([3, 60]), mapped), TABLE[[3, 60]])
    assert is_mapped(mapped)
    assert not is_mapped(mapped.clone()) and not is_mapped(mapped[1:]) and not is_mapped(None)


def test_a_range_whose_bytes_changed_is_refused_and_one_off_its_alignment_is_left_to_reading(tmp_path):
    on_disk, place = table_file(tmp_path)
    with open(on_disk.files[0].path, "r+b") as handle:
        handle.seek(place.offset + 100)
        handle.write(b"\xff")
    with pytest.raises(StorageError, match="'table' at byte 4096 fails its CRC-32C"):
        map_range(on_disk, place, "table")
    on_disk, place = table_file(tmp_path, offset=4098)
    assert map_range(on_disk, place, "table") is None

"""Atheris target of the checkpoint index reader (make fuzz): a *.safetensors.index.json
beside a good shard, opened as tt.compile(checkpoint=...) opens it.

Each input is the index's bytes. CheckpointError is the expected way to refuse one; any
other exception is a bug, and so is an index that reads a shard outside its folder.
Seeded from a valid index (fuzz/corpus/checkpoint_index/)."""

from __future__ import annotations

import os
import sys
import tempfile

import atheris
from instrumented import instrument_package

from tensortorrent.errors import CheckpointError
from tensortorrent.storage import checkpoint as checkpoints  # looked up at call time: instrumented

FOLDER = tempfile.mkdtemp(prefix="tt-index-fuzz-")
INDEX = os.path.join(FOLDER, "model.safetensors.index.json")
GOOD = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "broken", "good.safetensors")


def read_index(data: bytes) -> None:
    with open(INDEX, "wb") as handle:
        handle.write(data)
    try:
        checkpoint = checkpoints.open_checkpoint(INDEX)
    except CheckpointError:
        return
    outside = [path for path in checkpoint.files if not path.startswith(FOLDER + os.sep)]
    if outside:
        raise AssertionError(f"the index read shards outside its folder: {outside}")


if __name__ == "__main__":
    with open(GOOD, "rb") as source, open(os.path.join(FOLDER, "good.safetensors"), "wb") as copy:
        copy.write(source.read())
    instrument_package()
    atheris.Setup(sys.argv, read_index)
    atheris.Fuzz()

"""Writes the catalogue of broken files beside this script, one per failure kind.

Run it again after changing a case (`python tests/data/broken/make_catalogue.py`); the
files are committed so that they can be read and reviewed as they are, and
tests/unit/test_broken_files.py says which error each one must give.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

HERE = Path(__file__).parent


def entry(dtype: str, shape: list[int], begin: int, end: int) -> dict:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def safetensors_bytes(header: dict | str, data: bytes, length: int | None = None) -> bytes:
    """The 8-byte little-endian header length (the true one unless given), the header, the data."""
    text = (header if isinstance(header, str) else json.dumps(header, separators=(",", ":"))).encode()
    return struct.pack("<Q", len(text) if length is None else length) + text + data


GOOD = {"a": entry("F32", [2], 0, 8), "b": entry("F32", [1], 8, 12)}
DATA = bytes(range(12))
GOOD_TEXT = json.dumps(GOOD, separators=(",", ":"))

SAFETENSORS = {
    "header_length_past_the_file": safetensors_bytes(GOOD, DATA, length=4096),
    "header_length_overflow": safetensors_bytes(GOOD, DATA, length=2**64 - 1),
    "gap": safetensors_bytes({"a": entry("F32", [2], 0, 8), "b": entry("F32", [1], 12, 16)}, bytes(16)),
    "overlap": safetensors_bytes({"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 4, 12)}, DATA),
    "end_before_begin": safetensors_bytes({"a": entry("F32", [2], 0, 8), "b": entry("F32", [1], 12, 8)}, DATA),
    "trailing_bytes": safetensors_bytes(GOOD, DATA + b"\0\0\0\0"),
    "short_by_2_bytes": safetensors_bytes(GOOD, DATA[:-2]),
    "element_count_overflow": safetensors_bytes(
        {"a": entry("F32", [2**32, 2**32, 2], 0, 8), "b": entry("F32", [1], 8, 12)}, DATA
    ),
    "negative_dimension": safetensors_bytes({"a": entry("F32", [-2], 0, 8), "b": entry("F32", [1], 8, 12)}, DATA),
    "unknown_dtype": safetensors_bytes({"a": entry("F31", [2], 0, 8), "b": entry("F32", [1], 8, 12)}, DATA),
    # JSON with one name twice: json.dumps cannot write it, so the text is spelled out.
    "duplicate_names": safetensors_bytes(
        '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}',
        DATA,
    ),
}

# Indexes beside a good shard: one naming a shard that is not there, two whose shard
# paths leave the index's folder.
INDEXES = {
    "index_names_a_missing_shard": {"a": "good.safetensors", "b": "missing-00002.safetensors"},
    "index_shard_outside_its_folder": {"a": "good.safetensors", "b": "../outside.safetensors"},
    "index_shard_at_an_absolute_path": {"a": "good.safetensors", "b": "/etc/outside.safetensors"},
}


# Artifacts: a tiny model's artifact saved by the test, then its manifest changed at
# `path` (keys and list positions) to `value`.
ARTIFACT_PATCHES = {
    "artifact_manifest_wrong_types": [{"path": ["weights"], "value": {"not": "a list"}}],
    "artifact_manifest_file_outside": [{"path": ["files", "weights"], "value": "../weights.safetensors"}],
    "artifact_schedule_unknown_instruction": [{"path": ["schedule", 0, "deps"], "value": [999]}],
    # Found by make fuzz (fuzz/manifest_fuzz.py): these once escaped as torch's own exceptions.
    "artifact_signature_unknown_type": [
        {
            "path": ["signature", "spec"],
            "value": '[1, {"type": "builtins.nothing", "context": "null", "children_spec": []}]',
        }
    ],
    "artifact_signature_bad_device": [{"path": ["signature", "leaves", 0, "device"], "value": "cpu:x"}],
}


def write_catalogue(directory: Path) -> None:
    (directory / "good.safetensors").write_bytes(safetensors_bytes(GOOD, DATA))
    for name, raw in SAFETENSORS.items():
        (directory / f"{name}.safetensors").write_bytes(raw)
    for name, weight_map in INDEXES.items():
        index = {"metadata": {"total_size": 12}, "weight_map": weight_map}
        (directory / f"{name}.safetensors.index.json").write_text(json.dumps(index, indent=1) + "\n")
    for name, patch in ARTIFACT_PATCHES.items():
        (directory / f"{name}.patch.json").write_text(json.dumps(patch, indent=1) + "\n")


if __name__ == "__main__":
    write_catalogue(HERE)

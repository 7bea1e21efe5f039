"""Differential test of the native safetensors header reader against the safetensors package.

Valid files written by safetensors' own writers must read back field for field as
`safe_open` sees them; broken files made by mutating bytes must be refused by the native
reader exactly when the reference refuses them, except for a documented list of cases where
the reference is laxer than our rules (duplicate keys, unknown keys, ...), which we refuse.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from tensortorrent import _core, errors

safetensors = pytest.importorskip("safetensors")
from safetensors import safe_open  # noqa: E402
from safetensors.numpy import save_file as save_numpy  # noqa: E402
from safetensors.torch import save_file as save_torch  # noqa: E402


def file_bytes(header: str | bytes, data: bytes = b"", length: int | None = None) -> bytes:
    """A file of the 8-byte little-endian header length (the true one unless given), the header and the data."""
    raw = header.encode() if isinstance(header, str) else header
    return struct.pack("<Q", len(raw) if length is None else length) + raw + data


def entry(name: str, dtype: str, shape: str, begin: int, end: int) -> str:
    return f'"{name}":{{"dtype":"{dtype}","shape":{shape},"data_offsets":[{begin},{end}]}}'


def reference_accepts(path: Path) -> bool:
    """Whether safetensors opens the file and lists its tensors (it validates the whole header on open)."""
    try:
        with safe_open(str(path), framework="np") as f:
            for name in f.keys():
                f.get_slice(name).get_shape()
            f.metadata()
    except Exception:  # the reference raises SafetensorError, OSError or others depending on the case
        return False
    return True


def native_accepts(path: Path) -> bool:
    """Whether the native reader accepts the file; any refusal must be a DataCorruptionError."""
    try:
        _core.read_safetensors_header(str(path))
    except errors.DataCorruptionError:
        return False
    return True


def own_parse(path: Path) -> tuple[int, dict]:
    """N and the JSON header, parsed here independently of both readers."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return n, json.loads(raw[8 : 8 + n])


def assert_same_as_reference(path: Path) -> None:
    header = _core.read_safetensors_header(str(path))
    n, parsed = own_parse(path)
    assert header.header_bytes == n
    assert header.data_offset == 8 + n
    tensors = header.tensors
    assert [t.begin for t in tensors] == sorted(t.begin for t in tensors)
    with safe_open(str(path), framework="np") as f:
        assert sorted(t.name for t in tensors) == sorted(f.keys())
        for t in tensors:
            ref = f.get_slice(t.name)
            assert t.dtype == ref.get_dtype(), t.name
            assert list(t.shape) == list(ref.get_shape()), t.name
            assert [t.begin, t.end] == parsed[t.name]["data_offsets"], t.name
            assert header.find(t.name).begin == t.begin
        assert header.metadata == (f.metadata() or {})
    if tensors:
        assert header.data_offset + tensors[-1].end == path.stat().st_size


NUMPY_CASES = {
    "floats": {
        "a": np.arange(12, dtype=np.float64).reshape(3, 4),
        "b": np.ones(5, np.float32),
        "c": np.zeros(3, np.float16),
    },
    "ints": {
        "i8": np.arange(3, dtype=np.int8),
        "i16": np.arange(3, dtype=np.int16),
        "i32": np.arange(3, dtype=np.int32),
        "i64": np.arange(3, dtype=np.int64),
        "u8": np.arange(3, dtype=np.uint8),
        "u16": np.arange(3, dtype=np.uint16),
        "u32": np.arange(3, dtype=np.uint32),
        "u64": np.arange(3, dtype=np.uint64),
        "bool": np.array([True, False]),
    },
    "scalar_and_empty": {"s": np.array(2.5, np.float32), "e": np.zeros((0, 7), np.float32), "e2": np.zeros(0, np.int8)},
    "complex": {"c": np.ones((2, 2), np.complex64)},
    "none": {},
    "unicode_names": {"h.0.wé😀": np.ones(3, np.float32), "": np.ones(1, np.int64), 'q"\\': np.ones(2, np.uint8)},
    "many": {f"layer.{i}.w": np.full((i % 4, 3), i, np.float32) for i in range(40)},
}

TORCH_CASES = {
    "low_precision": {
        "bf16": torch.ones(3, 5, dtype=torch.bfloat16),
        "f16": torch.ones(4, dtype=torch.float16),
        "e4m3": torch.zeros(6, dtype=torch.float8_e4m3fn),
        "e5m2": torch.zeros(2, 2, dtype=torch.float8_e5m2),
    },
    "mixed": {"w": torch.randn(8, 8), "idx": torch.arange(10), "mask": torch.ones(3, dtype=torch.bool)},
}
if hasattr(torch, "float8_e8m0fnu"):
    TORCH_CASES["e8m0"] = {"scale": torch.zeros(4, dtype=torch.float8_e8m0fnu)}

METADATA = {"format": "pt", "note": 'quotes " and \\ and é', "empty": ""}


@pytest.mark.parametrize("case", sorted(NUMPY_CASES))
@pytest.mark.parametrize("metadata", [None, METADATA], ids=["no_metadata", "metadata"])
def test_numpy_files_read_as_the_reference_reads_them(tmp_path, case, metadata):
    path = tmp_path / "m.safetensors"
    save_numpy(NUMPY_CASES[case], str(path), metadata=metadata)
    assert_same_as_reference(path)


@pytest.mark.parametrize("case", sorted(TORCH_CASES))
def test_torch_files_read_as_the_reference_reads_them(tmp_path, case):
    path = tmp_path / "m.safetensors"
    save_torch(TORCH_CASES[case], str(path), metadata={"format": "pt"})
    assert_same_as_reference(path)


def test_missing_tensor_and_missing_file_are_not_found(tmp_path):
    path = tmp_path / "m.safetensors"
    save_numpy({"a": np.ones(2, np.float32)}, str(path))
    with pytest.raises(errors.NotFoundError, match="no tensor 'b'"):
        _core.read_safetensors_header(str(path)).find("b")
    with pytest.raises(errors.NotFoundError, match="missing.safetensors"):
        _core.read_safetensors_header(str(tmp_path / "missing.safetensors"))


A2 = entry("a", "U8", "[2]", 0, 2)
B4 = entry("b", "F32", "[1]", 2, 6)
BASE_HEADER = "{" + A2 + "," + B4 + "}"
BASE_DATA = b"\0" * 6
DEEP = "[" * 200 + "]" * 200

# (bytes, stricter): with stricter=False both readers must agree; with stricter=True the
# reference accepts a file that breaks our rules, and we must refuse it.
CASES: dict[str, tuple[bytes, bool]] = {
    "base": (file_bytes(BASE_HEADER, BASE_DATA), False),
    "empty_file": (b"", False),
    "seven_bytes": (b"\0" * 7, False),
    "zero_length": (file_bytes(""), False),
    "truncated_by_one": (file_bytes(BASE_HEADER, BASE_DATA)[:-1], False),
    "one_byte_appended": (file_bytes(BASE_HEADER, BASE_DATA + b"\0"), False),
    "truncated_into_header": (file_bytes(BASE_HEADER, BASE_DATA)[:20], False),
    "length_plus_one": (file_bytes(BASE_HEADER, BASE_DATA, length=len(BASE_HEADER) + 1), False),
    "length_minus_one": (file_bytes(BASE_HEADER, BASE_DATA, length=len(BASE_HEADER) - 1), False),
    "length_over_cap": (file_bytes("{}", length=100_000_001), False),
    "length_all_ones": (file_bytes("{}", length=2**64 - 1), False),
    "padded_with_spaces": (file_bytes(BASE_HEADER + "      ", BASE_DATA), False),
    "padded_with_newline_tab": (file_bytes(BASE_HEADER + "\n\t\r ", BASE_DATA), False),
    "leading_whitespace": (file_bytes("  \n" + BASE_HEADER, BASE_DATA), False),
    "padded_with_nul": (file_bytes(BASE_HEADER + "\0", BASE_DATA), False),
    "trailing_garbage": (file_bytes(BASE_HEADER + "x", BASE_DATA), False),
    "second_object": (file_bytes(BASE_HEADER + "{}", BASE_DATA), False),
    "byte_order_mark": (file_bytes("\ufeff" + BASE_HEADER, BASE_DATA), False),
    "not_utf8": (file_bytes(b'{"a\xff":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', b"\0\0"), False),
    "encoded_surrogate": (
        file_bytes(b'{"a\xed\xa0\x80":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', b"\0\0"),
        False,
    ),
    "not_json": (file_bytes("hello world", b""), False),
    "top_level_array": (file_bytes("[]"), False),
    "top_level_number": (file_bytes("1"), False),
    "empty_object": (file_bytes("{}"), False),
    "empty_object_with_data": (file_bytes("{}", b"x"), False),
    "unknown_dtype": (file_bytes("{" + entry("a", "U7", "[2]", 0, 2) + "}", b"\0\0"), False),
    "lower_case_dtype": (file_bytes("{" + entry("a", "u8", "[2]", 0, 2) + "}", b"\0\0"), False),
    "negative_shape": (file_bytes("{" + entry("a", "U8", "[-2]", 0, 2) + "}", b"\0\0"), False),
    "minus_zero_shape": (file_bytes("{" + entry("a", "U8", "[-0]", 0, 0) + "}"), False),
    "float_shape": (file_bytes("{" + entry("a", "U8", "[2.0]", 0, 2) + "}", b"\0\0"), False),
    "exponent_shape": (file_bytes("{" + entry("a", "U8", "[2e0]", 0, 2) + "}", b"\0\0"), False),
    "leading_zero_shape": (file_bytes("{" + entry("a", "U8", "[02]", 0, 2) + "}", b"\0\0"), False),
    "shape_above_u64": (file_bytes("{" + entry("a", "U8", "[18446744073709551616]", 0, 2) + "}", b"\0\0"), False),
    "shape_string": (file_bytes("{" + entry("a", "U8", '["2"]', 0, 2) + "}", b"\0\0"), False),
    "shape_product_overflow": (file_bytes("{" + entry("a", "U8", "[4294967296,4294967296,0]", 0, 0) + "}"), False),
    "shape_zero_first_no_overflow": (
        file_bytes("{" + entry("a", "U8", "[0,4294967296,4294967296]", 0, 0) + "}"),
        False,
    ),
    "shape_bytes_overflow": (file_bytes("{" + entry("a", "U64", "[4611686018427387904]", 0, 2) + "}", b"\0\0"), False),
    "begin_after_end": (file_bytes("{" + entry("a", "U8", "[2]", 2, 0) + "}", b"\0\0"), False),
    "size_mismatch": (file_bytes("{" + entry("a", "F32", "[2]", 0, 4) + "}", b"\0" * 4), False),
    "gap": (file_bytes("{" + A2 + "," + entry("b", "U8", "[2]", 3, 5) + "}", b"\0" * 5), False),
    "overlap": (file_bytes("{" + A2 + "," + entry("b", "U8", "[2]", 1, 3) + "}", b"\0" * 3), False),
    "not_starting_at_zero": (file_bytes("{" + entry("a", "U8", "[2]", 1, 3) + "}", b"\0" * 3), False),
    "offsets_listed_out_of_order": (file_bytes("{" + B4 + "," + A2 + "}", BASE_DATA), False),
    "zero_size_tensors_tie": (
        file_bytes("{" + entry("a", "U8", "[0]", 0, 0) + "," + entry("b", "F32", "[0,3]", 0, 0) + "}"),
        False,
    ),
    "three_offsets": (file_bytes('{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2,4]}}', b"\0\0"), False),
    "missing_offsets": (file_bytes('{"a":{"dtype":"U8","shape":[2]}}'), False),
    "entry_is_bool": (file_bytes('{"a":true}'), False),
    "metadata_strings": (file_bytes('{"__metadata__":{"k":"v","x":""},' + A2 + "}", b"\0\0"), False),
    "metadata_null": (file_bytes('{"__metadata__":null,' + A2 + "}", b"\0\0"), False),
    "metadata_after_tensors": (file_bytes("{" + A2 + ',"__metadata__":{"k":"v"}}', b"\0\0"), False),
    "metadata_number_value": (file_bytes('{"__metadata__":{"k":1}}'), False),
    "metadata_nested_value": (file_bytes('{"__metadata__":{"k":{"a":"b"}}}'), False),
    "metadata_string": (file_bytes('{"__metadata__":"x"}'), False),
    "metadata_twice": (file_bytes('{"__metadata__":{},"__metadata__":{}}'), False),
    "deep_nesting_in_metadata": (file_bytes('{"__metadata__":' + DEEP + "}"), False),
    "escaped_keys": (
        file_bytes('{"a\\u00e9":{"d\\u0074ype":"U\\u0038","shape":[2],"data_offsets":[0,2]}}', b"\0\0"),
        False,
    ),
    "surrogate_pair": (
        file_bytes('{"\\ud83d\\ude00":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', b"\0\0"),
        False,
    ),
    "lone_high_surrogate": (file_bytes('{"a\\ud83d":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', b"\0\0"), False),
    "lone_low_surrogate": (file_bytes('{"a\\ude00":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', b"\0\0"), False),
    "raw_control_character": (file_bytes('{"a\x01":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', b"\0\0"), False),
    "bad_escape": (file_bytes('{"a\\q":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', b"\0\0"), False),
    "trailing_comma": (file_bytes("{" + A2 + ",}", b"\0\0"), False),
    "comment": (file_bytes("{/**/" + A2 + "}", b"\0\0"), False),
    "f4_whole_bytes": (file_bytes("{" + entry("a", "F4", "[2,2]", 0, 2) + "}", b"\0\0"), False),
    "f4_odd_count": (file_bytes("{" + entry("a", "F4", "[3]", 0, 2) + "}", b"\0\0"), False),
    "f4_scalar": (file_bytes("{" + entry("a", "F4", "[]", 0, 0) + "}"), False),
    "f6_four_elements": (file_bytes("{" + entry("a", "F6_E2M3", "[4]", 0, 3) + "}", b"\0" * 3), False),
    "f6_two_elements": (file_bytes("{" + entry("a", "F6_E3M2", "[2]", 0, 2) + "}", b"\0" * 2), False),
    "fnuz_and_e8m0": (
        file_bytes(
            "{" + entry("a", "F8_E4M3FNUZ", "[1]", 0, 1) + "," + entry("b", "F8_E8M0", "[1]", 1, 2) + "}", b"\0\0"
        ),
        False,
    ),
    # The reference is laxer than our rules here: we refuse, on purpose.
    # serde_json keeps the last of duplicate keys; a header whose meaning depends on that is refused.
    "duplicate_tensor": (file_bytes("{" + A2 + "," + A2 + "}", b"\0\0"), True),
    "duplicate_metadata_key": (file_bytes('{"__metadata__":{"k":"v","k":"w"},' + A2 + "}", b"\0\0"), True),
    # serde ignores unknown fields of an entry, and takes an entry written as an array.
    "unknown_key_in_entry": (file_bytes('{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"x":1}}', b"\0\0"), True),
    "deep_unknown_key": (
        file_bytes('{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"x":' + "[" * 100 + "]" * 100 + "}}", b"\0\0"),
        True,
    ),
    "entry_as_array": (file_bytes('{"a":["U8",[2],[0,2]]}', b"\0\0"), True),
    # The reference takes any usize dimension; we hold dimensions as int64.
    "dimension_above_int64": (file_bytes("{" + entry("a", "U8", "[0,9223372036854775808]", 0, 0) + "}"), True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_refuses_a_file_exactly_when_the_reference_does(tmp_path, case):
    blob, stricter = CASES[case]
    path = tmp_path / "case.safetensors"
    path.write_bytes(blob)
    reference, native = reference_accepts(path), native_accepts(path)
    if stricter:
        assert reference and not native, f"reference accepts={reference}, native accepts={native}"
    else:
        assert native == reference, f"reference accepts={reference}, native accepts={native}"
    if native:
        assert_same_as_reference(path)


def test_single_byte_edits_of_a_header_agree_with_the_reference(tmp_path):
    """Every header byte of a small file replaced by each of a few bytes: both readers agree on every edit."""
    header = (
        "{" + entry("ab", "U8", "[2]", 0, 2) + "," + entry("cd", "I16", "[1,1]", 2, 4) + ',"__metadata__":{"k":"v"}}  '
    )
    blob = bytearray(file_bytes(header, b"\0" * 4))
    path = tmp_path / "edit.safetensors"
    disagreements = []
    for position in range(len(blob) - 4):
        for value in b' "019x\xff{]:,-\n':
            if blob[position] == value:
                continue
            edited = bytearray(blob)
            edited[position] = value
            path.write_bytes(bytes(edited))
            reference, native = reference_accepts(path), native_accepts(path)
            if reference != native:
                disagreements.append((position, bytes([value]), reference, native))
            elif native:
                assert_same_as_reference(path)
    assert not disagreements

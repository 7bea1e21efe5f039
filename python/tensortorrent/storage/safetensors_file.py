"""Weights as safetensors: every tensor 64-byte aligned (4 KiB where sizes allow), read back without copies."""

from __future__ import annotations

import ctypes
import json
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from .. import core
from ..errors import ArtifactError, InternalError, StorageError, UnsupportedError
from ..planning.weights_on_disk import WeightRange, WeightsOnDisk

if TYPE_CHECKING:  # a type read here; capture builds on storage
    from ..capture.program import BoundTensor

# Where a tensor's bytes start decides which BLAS kernel torch picks, and kernels round
# differently: a loaded weight must be as aligned as torch's own allocations (64 bytes)
# for a loaded module to compute exactly as the compiled one did.
ALIGNMENT = 64
# O_DIRECT reads need the file offset, the destination and the length in multiples of
# 4 KiB: a file whose data section and large tensors start at such offsets streams past
# the page cache (the faster mode on the disks measured, bench/streaming.py).
DIRECT_ALIGNMENT = 4096

SAFETENSORS_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
DTYPE_NAMES = {dtype: name for name, dtype in SAFETENSORS_DTYPES.items()}


def save_weights(
    bound: list[BoundTensor], path: str, on_disk: WeightsOnDisk | None = None, by_reference: bool = False
) -> list[dict[str, Any]]:
    """Writes each bound tensor once (tied names share it); returns the manifest's entries.

    A bound tensor on the meta device has its bytes on disk (`on_disk`: a checkpoint's or
    an artifact's file ranges): they are read when written, one tensor at a time, so that
    saving holds at most the largest tensor in memory. With `by_reference`, those are not
    written: their entries record their ranges instead (see weight_references.py), each
    checked first against the CRC-32C taken when it was compiled.
    """
    tensors: dict[str, torch.Tensor] = {}
    storages: set[int] = set()
    slot_of: dict[str, int] = {}
    references: dict[str, WeightRange] = {}
    for tensor in bound:
        if by_reference and on_disk is not None and tensor.slot in on_disk.ranges:
            # Checked now, as a copy would be: a file changed since compiling must not be
            # recorded as the reference (its digests would vouch for the changed bytes).
            read_range(on_disk, on_disk.ranges[tensor.slot], tensor.names[0])
            references[tensor.names[0]] = on_disk.ranges[tensor.slot]
            continue
        value = tensor.tensor.detach()
        if value.is_meta:
            if on_disk is None or tensor.slot not in on_disk.ranges:
                raise ArtifactError(f"weights: {tensor.names[0]!r} has no value in memory nor on disk to save")
            slot_of[tensor.names[0]] = tensor.slot
        else:
            value = value.contiguous()
            storage = value.untyped_storage().data_ptr()
            # A view of another bound tensor is stored on its own (the format holds no aliases).
            value = value.clone() if storage in storages else value
            storages.add(storage)
        tensors[tensor.names[0]] = value
    checksums: dict[str, int] = {}

    def bytes_of(key: str) -> torch.Tensor:
        value = tensors[key]
        if key in slot_of:
            value = read_range(on_disk, on_disk.ranges[slot_of[key]], key)
        # Checked by every load of this tensor alone when it streams from disk.
        checksums[key] = tensor_crc32c(value)
        return value

    write_safetensors(tensors, path, bytes_of)
    checksums.update((key, place.crc32c) for key, place in references.items())
    entries = []
    for tensor in bound:
        key = tensor.names[0]
        entry = {
            "key": key,
            "names": list(tensor.names),
            "kind": tensor.kind,
            "requires_grad": bool(tensor.tensor.requires_grad),
            "crc32c": checksums[key],
        }
        if key in references:
            entry["reference"] = reference_entry(references[key])
        entries.append(entry)
    return entries


def reference_entry(place: WeightRange) -> dict[str, Any]:
    """A tensor's range in a file the artifact references, for its manifest entry."""
    return {
        "file": place.file,
        "offset": place.offset,
        "nbytes": place.nbytes,
        "dtype": DTYPE_NAMES[place.dtype],
        "shape": list(place.shape),
    }


def read_range(on_disk: WeightsOnDisk, place: WeightRange, name: str) -> torch.Tensor:
    """A file range's bytes as a tensor of its dtype and shape, checked against its CRC-32C
    where one is recorded (StorageError naming the file otherwise)."""
    path = on_disk.path_of(place)
    raw = torch.empty(place.nbytes, dtype=torch.uint8)
    with open(path, "rb", buffering=0) as handle:
        handle.seek(place.offset)
        view, filled = memoryview(raw.numpy()), 0
        while filled < place.nbytes:
            count = handle.readinto(view[filled:])
            if not count:
                raise StorageError(f"{path}: ends at byte {place.offset + filled}, {name!r} needs {place.nbytes} bytes")
            filled += count
    if place.crc32c >= 0 and core.crc32c(raw) != place.crc32c:
        raise StorageError(f"{path}: {name!r} at byte {place.offset} fails its CRC-32C: the file changed")
    return raw.view(place.dtype).reshape(place.shape)


def read_slot(on_disk: WeightsOnDisk, slot: int) -> torch.Tensor:
    """Bound slot `slot`'s tensor, read from its file range into RAM."""
    return read_range(on_disk, on_disk.ranges[slot], f"bound slot {slot}")


def write_safetensors(
    tensors: dict[str, torch.Tensor], path: str, bytes_of: Callable[[str], torch.Tensor] | None = None
) -> None:
    """Writes `tensors` (contiguous, on the CPU; or placeholders of their dtypes and shapes
    when `bytes_of(key)` gives each one's value as it is written) as a safetensors file whose data section
    starts at a multiple of DIRECT_ALIGNMENT and whose tensors start at multiples of
    DIRECT_ALIGNMENT, else of ALIGNMENT, where the format allows.

    The format stores tensors back to back, so tensors whose size is a multiple of
    DIRECT_ALIGNMENT come first, then those of ALIGNMENT (each group largest first), and
    stay aligned; the rest follow. The header is padded with spaces, as the format
    permits, so that the data section is aligned.
    """
    for key, value in tensors.items():
        if value.dtype not in DTYPE_NAMES:
            raise UnsupportedError(
                f"weights: tensor {key!r} has dtype {value.dtype}; artifacts store {', '.join(DTYPE_NAMES.values())}"
            )
    order = sorted(tensors, key=lambda key: (_alignment_rank(_nbytes(tensors[key])), -_nbytes(tensors[key]), key))
    header: dict[str, Any] = {}
    offset = 0
    for key in order:
        value = tensors[key]
        header[key] = {
            "dtype": DTYPE_NAMES[value.dtype],
            "shape": list(value.shape),
            "data_offsets": [offset, offset + _nbytes(value)],
        }
        offset += _nbytes(value)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % DIRECT_ALIGNMENT)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(text)) + text)
        for key in order:
            value = tensors[key] if bytes_of is None else _as_placed(key, bytes_of(key), tensors[key], path)
            if _nbytes(value):
                # The tensor's own bytes, without a copy.
                handle.write((ctypes.c_char * _nbytes(value)).from_address(value.data_ptr()))


def _as_placed(key: str, value: torch.Tensor, placeholder: torch.Tensor, path: str) -> torch.Tensor:
    """`value` if the header written for `key` describes it (else InternalError: the
    bytes would land under another tensor's offsets)."""
    if (value.dtype, value.shape) != (placeholder.dtype, placeholder.shape) or not value.is_contiguous():
        raise InternalError(
            f"{path}: tensor {key!r}: the header says {placeholder.dtype} {tuple(placeholder.shape)}, "
            f"its value is {value.dtype} {tuple(value.shape)}{'' if value.is_contiguous() else ' (not contiguous)'}"
        )
    return value


def tensor_crc32c(tensor: torch.Tensor) -> int:
    """The CRC-32C of a contiguous CPU tensor's bytes, read in place."""
    if not _nbytes(tensor):
        return 0
    return core.crc32c(tensor.reshape(-1).view(torch.uint8))


def _alignment_rank(nbytes: int) -> int:
    """0 for sizes that keep the next tensor 4 KiB-aligned, 1 for 64-byte ones, 2 for the rest."""
    return 0 if nbytes % DIRECT_ALIGNMENT == 0 else 1 if nbytes % ALIGNMENT == 0 else 2


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def tensors_from_safetensors(data: memoryview, name: str) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file held in `data`, as views of it where aligned.

    Every offset and size is checked against the header, so a damaged file raises
    ArtifactError naming `name` instead of reading out of bounds.
    """
    if len(data) < 8:
        raise ArtifactError(f"{name}: {len(data)} bytes is too short for a safetensors file")
    (header_size,) = struct.unpack_from("<Q", data, 0)
    if header_size > len(data) - 8:
        raise ArtifactError(f"{name}: header of {header_size} bytes does not fit in a {len(data)}-byte file")
    try:
        header = json.loads(bytes(data[8 : 8 + header_size]))
    except ValueError as error:
        raise ArtifactError(f"{name}: header is not valid JSON ({error})") from error
    if not isinstance(header, dict):
        raise ArtifactError(f"{name}: header is not a JSON object")
    start = 8 + header_size
    tensors = {}
    for key, info in header.items():
        if key != "__metadata__":
            tensors[key] = _tensor(data, start, key, info, name)
    return tensors


def _tensor(data: memoryview, start: int, key: str, info: Any, name: str) -> torch.Tensor:
    try:
        dtype = SAFETENSORS_DTYPES[info["dtype"]]
        shape = [int(d) for d in info["shape"]]
        begin, end = (int(o) for o in info["data_offsets"])
    except (KeyError, TypeError, ValueError) as error:
        raise ArtifactError(f"{name}: tensor {key!r} has a malformed header entry ({error!r})") from error
    numel = 1
    for dim in shape:
        numel *= dim
    nbytes = numel * dtype.itemsize
    if min(shape, default=0) < 0 or begin < 0 or end - begin != nbytes or start + end > len(data):
        raise ArtifactError(f"{name}: tensor {key!r} lies outside the file or has the wrong size")
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    raw = torch.frombuffer(data, dtype=torch.uint8, count=nbytes, offset=start + begin)
    # A view only where it starts as aligned as torch's allocations; otherwise this one
    # tensor is copied (clone allocates aligned).
    return (raw if raw.data_ptr() % ALIGNMENT == 0 else raw.clone()).view(dtype).reshape(shape)

"""Weights mapped from their file instead of read: those a call only gathers from.

A decode step of a language model reads one row of its token embedding per token, and
of a mixture of experts' stacked experts the few its token is routed to; yet a streamed
tensor is read whole on every call, and a resident one is held whole in RAM. Mapped, it
costs what a call touches: the pages of the rows it gathers, read on first touch into
the page cache, which the kernel reclaims under pressure (a container's limit
included), never the budget's RAM. The range is checked against its
CRC-32C once, when mapped, by plain reads whose pages are let go after (the mapping's
own pages are touched only by the calls).

`is_mapped` tells the planner which bound tensors are such views, so that it counts them
as no RAM of the budget's.
"""

from __future__ import annotations

import os
import threading
import weakref

import torch

from .. import core
from ..errors import StorageError
from ..planning.weights_on_disk import WeightRange, WeightsOnDisk

CHECK_CHUNK_BYTES = 8 << 20  # read at a time when checking a range
_lock = threading.Lock()
_mapped: dict[int, tuple[int, weakref.ref]] = {}  # a mapping's first address -> (its bytes, its tensor)


def map_range(on_disk: WeightsOnDisk, place: WeightRange, name: str) -> torch.Tensor | None:
    """The range as a tensor of its dtype and shape viewing the file's mapped pages (the file
    mapped privately: writes stay in RAM); None where its offset does not suit its dtype's
    alignment (read it instead). StorageError where its bytes fail their CRC-32C."""
    if place.offset % place.dtype.itemsize:
        return None
    path = on_disk.path_of(place)
    if os.path.getsize(path) < place.offset + place.nbytes:
        raise StorageError(f"{path}: ends before byte {place.offset + place.nbytes}, which {name!r} needs")
    if place.crc32c >= 0:
        _check(path, place, name)
    whole = torch.from_file(path, shared=False, size=place.offset + place.nbytes, dtype=torch.uint8)
    tensor = whole[place.offset :].view(place.dtype).reshape(place.shape)
    with _lock:
        _mapped[tensor.data_ptr()] = (place.nbytes, weakref.ref(tensor))
    return tensor


def map_slot(on_disk: WeightsOnDisk, slot: int) -> torch.Tensor | None:
    """Bound slot `slot`'s tensor mapped from its file range (see map_range)."""
    return map_range(on_disk, on_disk.ranges[slot], f"bound slot {slot}")


def is_mapped(tensor: torch.Tensor | None) -> bool:
    """Whether `tensor` is (a view of the whole of) a range mapped by map_range."""
    if tensor is None:
        return False
    with _lock:
        entry = _mapped.get(tensor.data_ptr())
        if entry is not None and entry[1]() is None:  # that tensor is gone: its address may be reused
            del _mapped[tensor.data_ptr()]
            return False
    return entry is not None and entry[0] == tensor.numel() * tensor.element_size()


def _check(path: str, place: WeightRange, name: str) -> None:
    """Reads the range in chunks, checks its CRC-32C, and drops its pages from the page
    cache: the check read them all, a call needs few."""
    chunk = torch.empty(CHECK_CHUNK_BYTES, dtype=torch.uint8)
    view, crc, done = memoryview(chunk.numpy()), 0, 0
    with open(path, "rb", buffering=0) as handle:
        handle.seek(place.offset)
        while done < place.nbytes:
            count = handle.readinto(view[: min(CHECK_CHUNK_BYTES, place.nbytes - done)])
            if not count:
                raise StorageError(f"{path}: ends at byte {place.offset + done}, {name!r} needs {place.nbytes} bytes")
            crc = core.crc32c(chunk[:count], crc)
            done += count
        os.posix_fadvise(handle.fileno(), place.offset, place.nbytes, os.POSIX_FADV_DONTNEED)
    if crc != place.crc32c:
        raise StorageError(f"{path}: {name!r} at byte {place.offset} fails its CRC-32C: the file changed")

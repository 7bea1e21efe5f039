"""Pins the one mapping from native error codes to Python exception classes."""

from __future__ import annotations

import pytest

import tensortorrent as tt
from tensortorrent import _core, errors

EXPECTED = {
    "InvalidArgument": tt.ScheduleError,
    "NotFound": errors.NotFoundError,
    "ResourceExhausted": errors.ResourceExhaustedError,
    "Incompatible": errors.IncompatibleError,
    "DataCorruption": errors.DataCorruptionError,
    "IO": errors.StorageIOError,
    "Cancelled": tt.ExecutionCancelled,
    "Stalled": tt.ExecutionStalled,
    "Internal": tt.InternalError,
}


def test_every_native_code_is_mapped():
    assert list(_core.error_code_names()) == list(EXPECTED)


@pytest.mark.parametrize("code, cls", EXPECTED.items())
def test_code_maps_to_its_class_with_the_message(code, cls):
    with pytest.raises(cls) as caught:
        _core.raise_native_error(code, f"the {code} message")
    assert type(caught.value) is cls
    assert str(caught.value) == f"the {code} message"
    assert isinstance(caught.value, tt.TensorTorrentError)

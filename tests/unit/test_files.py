"""write_text_atomically replaces a file whole or not at all."""

from __future__ import annotations

import pytest

from tensortorrent.files import write_text_atomically


def test_writes_and_replaces(tmp_path):
    target = tmp_path / "out.json"
    assert write_text_atomically(target, "first") == str(target)
    write_text_atomically(target, "second")
    assert target.read_text() == "second"
    assert list(tmp_path.iterdir()) == [target]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    with pytest.raises(TypeError):
        write_text_atomically(target, object())  # not text: the write itself fails
    assert target.read_text() == "old"
    assert list(tmp_path.iterdir()) == [target]

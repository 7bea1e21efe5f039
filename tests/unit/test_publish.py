"""Publishing an artifact directory when renames race or the file system cannot exchange paths."""

from __future__ import annotations

import errno
import logging
import os

import pytest

import tensortorrent as tt
from tensortorrent import core
from tensortorrent.artifact import publish
from tensortorrent.artifact.publish import publish_directory
from tensortorrent.errors import IncompatibleError, StorageIOError

REAL_RENAME = os.rename


def artifact_writer(version: str):
    """Fills a directory with a two-file stand-in artifact; both files say `version`."""

    def write(directory: str) -> None:
        for name in ("manifest.json", "weights.safetensors"):
            with open(os.path.join(directory, name), "w") as handle:
                handle.write(version)

    return write


def contents(target) -> dict[str, str]:
    return {path.name: path.read_text() for path in target.iterdir()}


@pytest.fixture
def old(tmp_path):
    target = tmp_path / "artifact"
    publish_directory(str(target), artifact_writer("old"))
    return target


def only_the_target_is_left(target) -> bool:
    return [p.name for p in target.parent.iterdir()] == [target.name]


def native_error(code: int, cls=StorageIOError):
    def exchange(a, b):
        raise cls(f"exchange '{a}' and '{b}': {os.strerror(code)}")

    return exchange


@pytest.fixture(autouse=True)
def fresh_log_once():
    publish._note_no_exchange.cache_clear()


def test_the_exchange_replaces_the_old_artifact(old):
    publish_directory(str(old), artifact_writer("new"))
    assert contents(old) == {"manifest.json": "new", "weights.safetensors": "new"}
    assert only_the_target_is_left(old)


@pytest.mark.parametrize(
    "exchange",
    [
        native_error(errno.EINVAL, IncompatibleError),
        native_error(errno.ENOSYS, IncompatibleError),
        native_error(errno.EOPNOTSUPP),
    ],
    ids=["EINVAL", "ENOSYS", "EOPNOTSUPP"],
)
def test_without_exchange_the_old_is_moved_aside_then_removed(old, monkeypatch, caplog, exchange):
    monkeypatch.setattr(core, "exchange_paths", exchange)
    with caplog.at_level(logging.INFO, logger="tensortorrent.artifact.publish"):
        publish_directory(str(old), artifact_writer("new"))
        publish_directory(str(old), artifact_writer("newer"))
    assert contents(old) == {"manifest.json": "newer", "weights.safetensors": "newer"}
    assert only_the_target_is_left(old)
    notes = [r for r in caplog.records if "cannot exchange two paths atomically" in r.getMessage()]
    assert len(notes) == 1 and notes[0].levelno == logging.INFO


def test_a_failed_fallback_puts_the_old_artifact_back(old, monkeypatch):
    monkeypatch.setattr(core, "exchange_paths", native_error(errno.EINVAL, IncompatibleError))

    def rename(source, target):
        if ".saving-" in os.fspath(source) and not os.path.lexists(target):  # the fallback's second rename
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), source)
        REAL_RENAME(source, target)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(tt.ArtifactError, match=r"artifact: could not publish the artifact \(renaming the new"):
        publish_directory(str(old), artifact_writer("new"))
    assert contents(old) == {"manifest.json": "old", "weights.safetensors": "old"}
    assert only_the_target_is_left(old)


def test_a_path_that_keeps_changing_is_contention(old, monkeypatch):
    monkeypatch.setattr(core, "exchange_paths", native_error(errno.ENOENT))  # vanished before each exchange
    with pytest.raises(tt.ArtifactError, match="another process keeps changing the path"):
        publish_directory(str(old), artifact_writer("new"))
    assert contents(old) == {"manifest.json": "old", "weights.safetensors": "old"}
    assert only_the_target_is_left(old)


@pytest.mark.parametrize("code", [errno.EACCES, errno.EROFS, errno.EXDEV])
def test_another_rename_error_names_the_path_and_the_os_error(old, monkeypatch, code):
    def rename(source, target):
        raise OSError(code, os.strerror(code), source)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(tt.ArtifactError) as caught:
        publish_directory(str(old), artifact_writer("new"))
    assert str(caught.value) == f"{old}: could not publish the artifact ({os.strerror(code)})"
    assert contents(old) == {"manifest.json": "old", "weights.safetensors": "old"}
    assert only_the_target_is_left(old)


def test_another_exchange_error_names_the_path_and_the_os_error(old, monkeypatch):
    monkeypatch.setattr(core, "exchange_paths", native_error(errno.EIO))
    with pytest.raises(tt.ArtifactError, match=f"{old}: could not publish the artifact .*Input/output error"):
        publish_directory(str(old), artifact_writer("new"))
    assert contents(old) == {"manifest.json": "old", "weights.safetensors": "old"}
    assert only_the_target_is_left(old)


def test_missing_parent_folders_are_created_and_an_unwritable_place_is_named(tmp_path):
    target = tmp_path / "new" / "deeper" / "artifact"
    publish_directory(str(target), artifact_writer("v1"))
    assert contents(target) == {"manifest.json": "v1", "weights.safetensors": "v1"}
    (tmp_path / "a-file").write_text("")
    with pytest.raises(tt.ArtifactError, match=r"a-file/artifact: cannot write in .*a-file \("):
        publish_directory(str(tmp_path / "a-file" / "artifact"), artifact_writer("v1"))


def test_an_artifact_and_a_report_get_the_permissions_the_umask_gives(tmp_path):
    """Not mkdtemp's 0700 and mkstemp's 0600: a server running as another user (the
    Docker image's) reads artifacts saved here."""
    from tensortorrent.files import write_text_atomically

    previous = os.umask(0o027)
    try:
        target = publish_directory(str(tmp_path / "artifact"), artifact_writer("v1"))
        report = write_text_atomically(tmp_path / "report.json", "{}")
    finally:
        os.umask(previous)
    assert os.stat(target).st_mode & 0o777 == 0o750
    assert os.stat(report).st_mode & 0o777 == 0o640


def test_a_report_that_cannot_be_written_names_the_path_not_its_temporary(tmp_path):
    from tensortorrent.files import write_text_atomically

    (tmp_path / "a-directory").mkdir()
    with pytest.raises(StorageIOError, match=r"^trace: cannot write '.*a-directory': Is a directory$"):
        write_text_atomically(tmp_path / "a-directory", "{}", "trace")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-directory"]

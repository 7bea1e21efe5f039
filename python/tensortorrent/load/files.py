"""An artifact directory opened for loading: its files listed, integrity.json checked
against them, and each file read (its digests checked) on request."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from ..artifact.integrity import list_files, read_file, read_integrity
from ..errors import ArtifactError


@dataclass(frozen=True)
class ArtifactFiles:
    directory: str
    present: tuple[str, ...]
    records: dict[str, dict[str, Any]] | None  # integrity.json's, when it is verified

    @classmethod
    def open(cls, directory: str, verify_integrity: bool) -> ArtifactFiles:
        present = list_files(directory)
        records = read_integrity(directory, present) if verify_integrity else None
        return cls(directory, tuple(present), records)

    def read(self, name: str) -> memoryview:
        """The whole file, checked against its integrity record where there is one."""
        self.check_present(name)
        return read_file(self.directory, name, self.record(name))

    def read_json(self, name: str) -> Any:
        return json_value(self.read(name), name)

    def record(self, name: str) -> dict[str, Any] | None:
        return self.records[name] if self.records is not None else None

    def path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def check_present(self, name: str) -> None:
        if name not in self.present:
            raise ArtifactError(f"{name}: missing")


def json_value(raw: memoryview, name: str) -> Any:
    try:
        return json.loads(bytes(raw))
    except ValueError as error:
        raise ArtifactError(f"{name}: not valid JSON ({error})") from error

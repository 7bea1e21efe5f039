"""Atheris target of an artifact manifest's readers (make fuzz): what tt.load_compiled reads
from manifest.json before it opens the program.

Each input is a manifest's bytes. ArtifactError is the expected way to refuse one; any other
exception is a bug. Seeded from a real manifest (fuzz/corpus/manifest/)."""

from __future__ import annotations

import sys

import atheris
from instrumented import instrument_package

# Modules, not their functions: calls look the functions up there, instrumented.
from tensortorrent import planning
from tensortorrent.artifact import compressed_entry, devices
from tensortorrent.errors import ArtifactError, TensorTorrentError
from tensortorrent.load import compiled, program


def read_manifest(data: bytes) -> None:
    try:
        manifest = compiled.parse_manifest(memoryview(data))
        program.saved_parts(manifest)
        devices.saved_devices(manifest)
        program.saved_layers(manifest)
        compressed_entry.saved_accuracy(manifest, "manifest.json")
        program.replay_decision(manifest, same_config=True)
        try:  # as load/program.py's _saved_plan reads it, which turns these into ArtifactError
            planning.plan_from_json(manifest["plan"], manifest["schedule"])
        except (KeyError, TypeError, ValueError, TensorTorrentError):
            pass
    except ArtifactError:
        pass


if __name__ == "__main__":
    instrument_package()
    atheris.Setup(sys.argv, read_manifest)
    atheris.Fuzz()

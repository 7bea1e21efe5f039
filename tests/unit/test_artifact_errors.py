"""Damaged, foreign or unsafe artifacts raise ArtifactError naming the file; nothing runs."""

from __future__ import annotations

import io
import json
import os
import pickle
import zipfile

import pytest
import torch
from torch import nn

import tensortorrent as tt


@pytest.fixture
def artifact(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    tt.compile(model, example_inputs=(torch.randn(3, 8),)).save(tmp_path / "a")
    return tmp_path / "a"


def rewrite_manifest(path, change, fix_integrity=True):
    manifest = json.loads((path / "manifest.json").read_text())
    change(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))
    if fix_integrity:
        refresh_integrity(path)


def refresh_integrity(path):
    """Makes integrity.json agree with the files again, to reach the checks behind it."""
    from tensortorrent.storage.file_digests import digest_file

    integrity = json.loads((path / "integrity.json").read_text())
    integrity["files"] = {name: digest_file(str(path / name)) for name in integrity["files"]}
    (path / "integrity.json").write_text(json.dumps(integrity))


def load_fails(path, match, **kwargs):
    with pytest.raises(tt.ArtifactError, match=match):
        tt.load_compiled(path, **kwargs)


def test_missing_file(artifact):
    os.remove(artifact / "program.pt2")
    load_fails(artifact, r"program.pt2: missing")


def test_extra_file(artifact):
    (artifact / "notes.txt").write_text("hello")
    load_fails(artifact, r"notes.txt: extra file")


def test_modified_file(artifact):
    rewrite_manifest(artifact, lambda m: m.update(model_name="Other"), fix_integrity=False)
    load_fails(artifact, r"manifest.json: .*(size|sha256)")


def test_truncated_weights(artifact):
    weights = artifact / "weights.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    load_fails(artifact, r"weights.safetensors: size .* \(truncated or modified\)")


def test_bit_flip_in_weights(artifact):
    weights = artifact / "weights.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0x01
    weights.write_bytes(bytes(data))
    load_fails(artifact, r"weights.safetensors: sha256 differs")


def test_damaged_weights_without_verification_still_fail_clearly(artifact):
    weights = artifact / "weights.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    load_fails(artifact, r"weights.safetensors: tensor .* outside the file", verify_integrity=False)


def test_manifest_not_json(artifact):
    (artifact / "manifest.json").write_text("{not json")
    refresh_integrity(artifact)
    load_fails(artifact, r"manifest.json: not valid JSON")


def test_manifest_missing_field(artifact):
    rewrite_manifest(artifact, lambda m: m.pop("schedule"))
    load_fails(artifact, r"manifest.json: missing field 'schedule'")


def test_newer_format_version(artifact):
    rewrite_manifest(artifact, lambda m: m.update(format_version=99))
    load_fails(artifact, r"format version 99 needs a newer tensortorrent \(this one reads versions up to 1\)")


def test_symlink_in_artifact(artifact, tmp_path):
    (tmp_path / "elsewhere").write_text("x")
    os.symlink(tmp_path / "elsewhere", artifact / "link")
    load_fails(artifact, r"link: is a symlink")


def test_artifact_directory_is_a_symlink(artifact, tmp_path):
    os.symlink(artifact, tmp_path / "alias")
    load_fails(tmp_path / "alias", r"is a symlink")


@pytest.mark.parametrize("name", ["../weights.safetensors", "/etc/passwd", "..", ""])
def test_path_escaping_the_directory(artifact, name):
    rewrite_manifest(artifact, lambda m: m["files"].update(weights=name))
    load_fails(artifact, r"files\['weights'\]: expected a file name inside the artifact directory")


def test_verify_integrity_must_be_a_bool(artifact):
    with pytest.raises(TypeError, match="verify_integrity: expected a bool, got int"):
        tt.load_compiled(artifact, verify_integrity=1)


def test_no_artifact_there(tmp_path):
    load_fails(tmp_path / "nothing", r"no artifact directory there")
    (tmp_path / "other" / "sub").mkdir(parents=True)  # some other folder: named as not an artifact first
    load_fails(tmp_path / "other", r"other: manifest.json missing; not a TensorTorrent artifact")


def test_save_refuses_to_replace_a_foreign_directory(tmp_path):
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "thesis.tex").write_text("years of work")
    compiled = tt.compile(nn.Linear(2, 2), example_inputs=(torch.randn(1, 2),))
    with pytest.raises(tt.ArtifactError, match="not a TensorTorrent artifact; refusing to replace it"):
        compiled.save(tmp_path / "precious")
    assert (tmp_path / "precious" / "thesis.tex").read_text() == "years of work"


class WritesMarker:
    """Unpickling this creates a file: proof that an artifact ran code."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_pickled_parts_are_refused_before_anything_is_unpickled(artifact, tmp_path):
    marker = tmp_path / "marker"
    payload = pickle.dumps(WritesMarker(str(marker)))
    original = (artifact / "program.pt2").read_bytes()
    rebuilt = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(original)) as source, zipfile.ZipFile(rebuilt, "w") as target:
        top = source.namelist()[0].split("/", 1)[0]
        for entry in source.infolist():
            data = payload if entry.filename.endswith("sample_inputs/model.pt") else source.read(entry)
            target.writestr(entry, data)
        target.writestr(f"{top}/data/constants/custom_obj_0", payload)
    (artifact / "program.pt2").write_bytes(rebuilt.getvalue())
    refresh_integrity(artifact)
    with pytest.raises(tt.UnsafeArtifactError, match="program.pt2"):
        tt.load_compiled(artifact)
    with pytest.raises(tt.UnsafeArtifactError):
        tt.load_compiled(artifact, verify_integrity=False)
    assert not marker.exists()
    pickle.loads(payload).close()  # the payload is real: unpickling it does create the marker
    assert marker.exists()


def rewrite_program(artifact, change):
    """program.pt2 with `change(name, bytes) -> bytes` applied to each entry, integrity refreshed."""
    original = (artifact / "program.pt2").read_bytes()
    rebuilt = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(original)) as source, zipfile.ZipFile(rebuilt, "w") as target:
        for entry in source.infolist():
            target.writestr(entry, change(entry.filename, source.read(entry)))
    (artifact / "program.pt2").write_bytes(rebuilt.getvalue())
    refresh_integrity(artifact)


def test_an_output_type_this_process_cannot_rebuild_is_named(artifact):
    def renamed(name, data):  # the outputs as a class that no module registered
        return data.replace(b'\\"type\\": \\"builtins.tuple\\"', b'\\"type\\": \\"elsewhere.Outputs\\"')

    rewrite_program(artifact, lambda name, data: renamed(name, data) if name.endswith("model.json") else data)
    load_fails(artifact, r"program.pt2: its inputs or outputs are a elsewhere.Outputs, .* import the module")


def test_a_damaged_program_without_verification_fails_clearly(artifact):
    data = bytearray((artifact / "program.pt2").read_bytes())
    start = data.index(b'"graph_module"')  # inside the compressed-or-stored model.json
    data[start : start + 14] = b'"grXph_module"'
    (artifact / "program.pt2").write_bytes(bytes(data))
    load_fails(artifact, r"program.pt2: (damaged archive|unreadable program)", verify_integrity=False)


def test_outputs_torch_export_cannot_record_are_refused_and_nothing_is_written(tmp_path):
    import collections

    pair = collections.namedtuple("Pair", "doubled shifted")

    class Paired(nn.Module):
        def forward(self, x):
            return pair(x * 2, x + 1)

    compiled = tt.compile(Paired(), example_inputs=(torch.randn(3),))
    with pytest.raises(tt.UnsupportedError, match="saving: .*namedtuple.*return tuples, lists or dicts"):
        compiled.save(tmp_path / "a")
    assert list(tmp_path.iterdir()) == []


def test_loading_with_validate_numerics_is_refused_not_ignored(artifact):
    with pytest.raises(tt.UnsupportedFeatureError, match="validate_numerics=True cannot be combined with tt.load"):
        tt.load_compiled(artifact, config=tt.CompileConfig(validate_numerics=True))

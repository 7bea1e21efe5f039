"""The catalogue of broken files (tests/data/broken/, written by its make_catalogue.py):
each gives a typed error of its own that names the file and, where the fault has them, the
tensor and the byte; the safetensors package refuses the same safetensors files; a
failed load leaves the artifact as it was."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import torch
from torch import nn
from unit.test_safetensors_reader import reference_accepts

import tensortorrent as tt
from tensortorrent.storage.checkpoint import open_checkpoint

BROKEN = Path(__file__).parents[1] / "data" / "broken"

# File -> what its message says beyond the file's path.
SAFETENSORS = {
    "header_length_past_the_file": ["header length 4096 (bytes 0-7) runs to byte 4104 but the file holds"],
    "header_length_overflow": ["header length 18446744073709551615 (bytes 0-7) is above the limit"],
    "gap": ["tensor 'b': data begins at byte 12", "(a gap)"],
    "overlap": ["tensor 'b': data begins at byte 4", "(an overlap)"],
    "end_before_begin": ["tensor 'b' (its entry at byte 66): data_offsets [12, 8] end before they begin"],
    "trailing_bytes": ["tensor 'b': data ends at byte 12 but the data section holds 16 bytes"],
    "short_by_2_bytes": ["tensor 'b': data ends at byte 12 but the data section holds 10 bytes"],
    "element_count_overflow": ["tensor 'a' (its entry at byte 13): the element count of its shape overflows"],
    "negative_dimension": ["tensor 'a': shape[0] is -2", "at byte 37"],
    "unknown_dtype": ["tensor 'a': unknown dtype 'F31' at byte 22"],
    "duplicate_names": ["duplicate key 'a' at byte 62"],
}
INDEXES = {
    "index_names_a_missing_shard": ["names 1 shard file(s) that do not exist", "missing-00002.safetensors"],
    "index_shard_outside_its_folder": ["names shard file(s) outside its folder", "'../outside.safetensors'"],
    "index_shard_at_an_absolute_path": ["names shard file(s) outside its folder", "'/etc/outside.safetensors'"],
}
ARTIFACTS = {
    "artifact_manifest_wrong_types": "manifest.json: field 'weights' has type dict, expected list",
    "artifact_manifest_file_outside": "files['weights']: expected a file name inside the artifact directory",
    "artifact_schedule_unknown_instruction": "schedule: instruction 0 depends on unknown instruction 999",
    "artifact_signature_unknown_type": "unreadable config or input signature (input structure: Deserializing",
    "artifact_signature_bad_device": "unreadable config or input signature (device 'cpu:x'",
}


def test_the_catalogue_is_what_its_script_writes_and_every_file_is_tested(tmp_path):
    spec = importlib.util.spec_from_file_location("make_catalogue", BROKEN / "make_catalogue.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.write_catalogue(tmp_path)
    written = {path.name for path in tmp_path.iterdir()}
    assert written == {path.name for path in BROKEN.iterdir()} - {"make_catalogue.py", "__pycache__"}
    assert all((tmp_path / name).read_bytes() == (BROKEN / name).read_bytes() for name in written)
    tested = set(CHECKPOINT_FILES) | {f"{n}.patch.json" for n in ARTIFACTS}
    assert written - {"good.safetensors"} == tested


def test_the_good_file_reads():
    assert set(open_checkpoint(BROKEN / "good.safetensors").tensors) == {"a", "b"}


CHECKPOINT_FILES = {f"{n}.safetensors": parts for n, parts in SAFETENSORS.items()} | {
    f"{n}.safetensors.index.json": parts for n, parts in INDEXES.items()
}


@pytest.mark.parametrize("name", sorted(CHECKPOINT_FILES))
def test_a_broken_checkpoint_file_gives_its_own_error(name):
    path = BROKEN / name
    with pytest.raises(tt.CheckpointError) as caught:
        open_checkpoint(path)
    message = str(caught.value)
    assert str(path) in message and all(part in message for part in CHECKPOINT_FILES[name]), message
    if name.endswith(".safetensors"):
        assert not reference_accepts(path)  # the safetensors package refuses it too


@pytest.fixture(scope="module")
def artifact(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4)).eval()
    path = tmp_path_factory.mktemp("saved") / "artifact"
    tt.compile(model, (torch.randn(2, 8),), devices="cpu").save(path)
    return path


@pytest.mark.parametrize("name", sorted(ARTIFACTS))
def test_a_broken_manifest_gives_its_own_error_and_leaves_the_artifact_as_it_was(name, artifact, tmp_path):
    broken = tmp_path / name
    shutil.copytree(artifact, broken)
    manifest = json.loads((broken / "manifest.json").read_text())
    for change in json.loads((BROKEN / f"{name}.patch.json").read_text()):
        *parents, last = change["path"]
        owner = manifest
        for key in parents:
            owner = owner[key]
        owner[last] = change["value"]
    (broken / "manifest.json").write_text(json.dumps(manifest))
    before = {path.name: path.read_bytes() for path in broken.iterdir()}
    with pytest.raises(tt.ArtifactError, match="manifest.json: size .* \\(truncated or modified\\)"):  # digests first
        tt.load_compiled(broken)
    # Past the digests, the reader itself refuses it, naming the artifact.
    with pytest.raises(tt.ArtifactError) as caught:
        tt.load_compiled(broken, verify_integrity=False)
    assert str(broken) in str(caught.value) and ARTIFACTS[name] in str(caught.value), str(caught.value)
    assert {path.name: path.read_bytes() for path in broken.iterdir()} == before

"""Checkpoints located from their headers alone, and models' names matched against them."""

from __future__ import annotations

import json
import os
import pathlib

import pytest
import torch

import tensortorrent as tt
from tensortorrent.storage.checkpoint import open_checkpoint
from tensortorrent.storage.name_matching import match_checkpoint

pytest.importorskip("safetensors")
from safetensors.torch import save_file  # noqa: E402


def sample_tensors(prefix: str = "", count: int = 3) -> dict[str, torch.Tensor]:
    """Tensors of several dtypes and shapes, named `<prefix>layers.<i>.<kind>`."""
    generator = torch.Generator().manual_seed(0)
    tensors = {}
    for index in range(count):
        tensors[f"{prefix}layers.{index}.weight"] = torch.randn(4, 3 + index, generator=generator)
        tensors[f"{prefix}layers.{index}.bias"] = torch.randn(4, generator=generator).to(torch.bfloat16)
    tensors[f"{prefix}steps"] = torch.arange(5, dtype=torch.int64)
    tensors[f"{prefix}mask"] = torch.tensor([True, False, True])
    tensors[f"{prefix}scale"] = torch.tensor(2.0, dtype=torch.float16)
    return tensors


def save_sharded(folder: pathlib.Path, tensors: dict[str, torch.Tensor], shards: int = 3) -> pathlib.Path:
    """Writes `tensors` as Hugging Face does: model-0000i-of-0000n.safetensors plus an index."""
    names = list(tensors)
    weight_map = {}
    for shard in range(shards):
        file_name = f"model-{shard + 1:05d}-of-{shards:05d}.safetensors"
        part = {name: tensors[name] for name in names[shard::shards]}
        save_file(part, str(folder / file_name), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, file_name))
    total = sum(tensor.numel() * tensor.element_size() for tensor in tensors.values())
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    return index


def signatures(tensors: dict[str, torch.Tensor]) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
    return {name: (tensor.dtype, tuple(tensor.shape)) for name, tensor in tensors.items()}


def assert_located(checkpoint, tensors: dict[str, torch.Tensor]) -> None:
    """Every tensor's recorded range holds exactly its bytes, read back with plain file reads."""
    assert set(checkpoint.tensors) == set(tensors)
    for name, expected in tensors.items():
        located = checkpoint.tensors[name]
        assert located.name == name and os.path.isabs(located.path) and located.path in checkpoint.files
        assert (located.dtype, located.shape) == (expected.dtype, tuple(expected.shape))
        with open(located.path, "rb") as file:
            file.seek(located.offset)
            got = file.read(located.nbytes)
        assert got == expected.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


# --- locating tensors -------------------------------------------------------------------------


def test_one_file_by_str_and_pathlike(tmp_path):
    tensors = sample_tensors()
    save_file(tensors, str(tmp_path / "weights.safetensors"))
    for given in (str(tmp_path / "weights.safetensors"), tmp_path / "weights.safetensors"):
        checkpoint = open_checkpoint(given)
        assert checkpoint.files == (str(tmp_path / "weights.safetensors"),)
        assert_located(checkpoint, tensors)
    assert checkpoint.file_sizes() == {checkpoint.files[0]: os.path.getsize(tmp_path / "weights.safetensors")}


def test_relative_path_becomes_absolute(tmp_path, monkeypatch):
    tensors = sample_tensors()
    save_file(tensors, str(tmp_path / "weights.safetensors"))
    monkeypatch.chdir(tmp_path)
    checkpoint = open_checkpoint("weights.safetensors")
    assert checkpoint.files == (str(tmp_path / "weights.safetensors"),)
    assert_located(checkpoint, tensors)


def test_sharded_index(tmp_path):
    tensors = sample_tensors()
    index = save_sharded(tmp_path, tensors)
    checkpoint = open_checkpoint(index)
    assert checkpoint.files == tuple(str(tmp_path / f"model-0000{i}-of-00003.safetensors") for i in (1, 2, 3))
    assert_located(checkpoint, tensors)
    assert sorted(checkpoint.file_sizes().values()) == sorted(os.path.getsize(f) for f in checkpoint.files)


def test_folder_prefers_the_index(tmp_path):
    tensors = sample_tensors()
    save_sharded(tmp_path, tensors)
    assert_located(open_checkpoint(tmp_path), tensors)


def test_folder_with_model_safetensors(tmp_path):
    tensors = sample_tensors()
    save_file(tensors, str(tmp_path / "model.safetensors"))
    save_file({"other": torch.zeros(1)}, str(tmp_path / "other.safetensors"))  # model.safetensors wins
    checkpoint = open_checkpoint(str(tmp_path))
    assert checkpoint.files == (str(tmp_path / "model.safetensors"),)
    assert_located(checkpoint, tensors)


def test_folder_with_one_other_file(tmp_path):
    tensors = sample_tensors()
    save_file(tensors, str(tmp_path / "pytorch_weights.safetensors"))
    (tmp_path / "config.json").write_text("{}")
    assert open_checkpoint(tmp_path).files == (str(tmp_path / "pytorch_weights.safetensors"),)


def test_folder_with_one_other_index(tmp_path):
    tensors = sample_tensors()
    save_sharded(tmp_path, tensors).rename(tmp_path / "weights.safetensors.index.json")
    assert_located(open_checkpoint(tmp_path), tensors)


def test_list_of_files_in_sorted_order(tmp_path):
    first, second = sample_tensors("a."), sample_tensors("b.")
    save_file(first, str(tmp_path / "a.safetensors"))
    save_file(second, str(tmp_path / "b.safetensors"))
    for given in ([tmp_path / "b.safetensors", tmp_path / "a.safetensors"], (str(tmp_path / "a.safetensors"),)):
        checkpoint = open_checkpoint(given)
        assert checkpoint.files == tuple(sorted(str(path) for path in given))
    checkpoint = open_checkpoint([tmp_path / "b.safetensors", str(tmp_path / "a.safetensors")])
    assert_located(checkpoint, first | second)


# --- errors while locating --------------------------------------------------------------------


def test_path_that_does_not_exist(tmp_path):
    with pytest.raises(tt.CheckpointError, match="nowhere.safetensors: no such file or folder"):
        open_checkpoint(tmp_path / "nowhere.safetensors")
    with pytest.raises(tt.CheckpointError, match="nowhere.safetensors does not exist"):
        open_checkpoint([tmp_path / "nowhere.safetensors"])


def test_not_a_safetensors_file(tmp_path):
    (tmp_path / "broken.safetensors").write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{oops")
    with pytest.raises(tt.CheckpointError, match="broken.safetensors is not a readable safetensors file: ") as caught:
        open_checkpoint(tmp_path / "broken.safetensors")
    assert isinstance(caught.value.__cause__, tt.StorageError)  # the native reader's reason is kept
    assert str(caught.value.__cause__) in str(caught.value)


def test_unsupported_dtype_names_the_tensor(tmp_path):
    save_file({"fp8": torch.zeros(2, dtype=torch.float8_e4m3fn)}, str(tmp_path / "f8.safetensors"))
    with pytest.raises(tt.CheckpointError, match=r"f8.safetensors: tensor 'fp8' has dtype F8_E4M3; supported are F64"):
        open_checkpoint(tmp_path / "f8.safetensors")


def test_index_names_a_missing_shard(tmp_path):
    index = save_sharded(tmp_path, sample_tensors())
    (tmp_path / "model-00002-of-00003.safetensors").unlink()
    with pytest.raises(tt.CheckpointError, match=r"names 1 shard file\(s\) that do not exist: '.*model-00002-of"):
        open_checkpoint(index)


def test_index_places_a_tensor_in_the_wrong_shard(tmp_path):
    index = save_sharded(tmp_path, sample_tensors())
    content = json.loads(index.read_text())
    assert content["weight_map"]["steps"] == "model-00001-of-00003.safetensors"
    content["weight_map"]["steps"] = "model-00002-of-00003.safetensors"  # it is in the first shard
    content["weight_map"]["ghost"] = "model-00001-of-00003.safetensors"  # it is in none
    index.write_text(json.dumps(content))
    with pytest.raises(tt.CheckpointError, match=r"places 2 tensor\(s\) in shards that do not hold them: ") as caught:
        open_checkpoint(index)
    assert "'steps' in model-00002-of-00003.safetensors, 'ghost' in model-00001-of-00003" in str(caught.value)


def test_shard_holds_tensors_the_index_does_not_list(tmp_path):
    index = save_sharded(tmp_path, sample_tensors())
    extra = {f"extra.{i:02d}": torch.zeros(1) for i in range(12)}
    save_file(extra, str(tmp_path / "model-00002-of-00003.safetensors"))
    content = json.loads(index.read_text())
    content["weight_map"] = {k: v for k, v in content["weight_map"].items() if not v.startswith("model-00002")}
    content["weight_map"]["extra.00"] = "model-00002-of-00003.safetensors"
    index.write_text(json.dumps(content))
    with pytest.raises(tt.CheckpointError, match=r"hold 11 tensor\(s\) that its weight_map does not list: ") as caught:
        open_checkpoint(index)
    assert "'extra.01', " in str(caught.value) and "'extra.10' and 1 more" in str(caught.value)
    assert "extra.11" not in str(caught.value)


@pytest.mark.parametrize("content", ["{not json", '{"metadata": {}}', '{"weight_map": {"a": 3}}', "[1]"])
def test_index_that_is_not_a_weight_map(tmp_path, content):
    (tmp_path / "model.safetensors.index.json").write_text(content)
    with pytest.raises(tt.CheckpointError, match="model.safetensors.index.json"):
        open_checkpoint(tmp_path)


def test_tensor_in_two_files(tmp_path):
    save_file({"shared": torch.zeros(2), "a": torch.zeros(1)}, str(tmp_path / "a.safetensors"))
    save_file({"shared": torch.zeros(2), "b": torch.zeros(1)}, str(tmp_path / "b.safetensors"))
    with pytest.raises(
        tt.CheckpointError, match=r"tensor 'shared' is in two files: .*a.safetensors and .*b.safetensors"
    ):
        open_checkpoint([tmp_path / "a.safetensors", tmp_path / "b.safetensors"])
    with pytest.raises(tt.CheckpointError, match=r"file .*a.safetensors is given twice"):
        open_checkpoint([tmp_path / "a.safetensors", str(tmp_path / "a.safetensors")])


def test_tensor_in_two_shards_of_an_index(tmp_path):
    save_file({"shared": torch.zeros(2)}, str(tmp_path / "one.safetensors"))
    save_file({"shared": torch.zeros(2)}, str(tmp_path / "two.safetensors"))
    (tmp_path / "x.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"shared": "one.safetensors", "other": "two.safetensors"}})
    )
    with pytest.raises(tt.CheckpointError, match="tensor 'shared' is in two files"):
        open_checkpoint(tmp_path / "x.safetensors.index.json")


def test_empty_folder(tmp_path):
    (tmp_path / "notes.txt").write_text("no weights here")
    with pytest.raises(tt.CheckpointError, match="holds no .*safetensors.index.json and no .*safetensors file"):
        open_checkpoint(tmp_path)


@pytest.mark.parametrize("suffix", [".safetensors", ".safetensors.index.json"])
def test_folder_with_several_candidates(tmp_path, suffix):
    for name in ("a", "b"):
        (tmp_path / f"{name}{suffix}").write_text("{}")
    with pytest.raises(tt.CheckpointError, match=rf"holds 2 \*{suffix} files .*'a{suffix}', 'b{suffix}'"):
        open_checkpoint(tmp_path)


def test_folder_inside_a_list(tmp_path):
    with pytest.raises(tt.CheckpointError, match="is a folder, not a .safetensors file"):
        open_checkpoint([tmp_path])


@pytest.mark.parametrize("given", [42, None, b"model.safetensors", {"a": "b"}, ["ok.safetensors", 3]])
def test_wrong_kind_of_argument(given):
    with pytest.raises(
        tt.InvalidArgumentError, match=r"expected a path \(str or os.PathLike\).* got (int|NoneType|bytes|dict)"
    ):
        open_checkpoint(given)


def test_empty_list():
    with pytest.raises(tt.CheckpointError, match="got an empty list"):
        open_checkpoint([])


# --- matching names ---------------------------------------------------------------------------


@pytest.fixture
def plain_checkpoint(tmp_path):
    save_file(sample_tensors(), str(tmp_path / "model.safetensors"))
    return open_checkpoint(tmp_path)


def test_names_match_exactly(plain_checkpoint):
    tensors = sample_tensors()
    matched = match_checkpoint(signatures(tensors), plain_checkpoint)
    assert list(matched) == list(tensors)
    assert all(matched[name] is plain_checkpoint.tensors[name] for name in tensors)


def test_wrapper_prefix_removed_from_the_model_names(plain_checkpoint):
    # A wrapper holding the model as `self.model` names its parameters `model.<name>`.
    wrapped = signatures(sample_tensors("model."))
    matched = match_checkpoint(wrapped, plain_checkpoint)
    assert {name: tensor.name for name, tensor in matched.items()} == {name: name[6:] for name in wrapped}


def test_prefix_added_to_the_model_names(tmp_path):
    save_file(sample_tensors("model.decoder."), str(tmp_path / "model.safetensors"))
    matched = match_checkpoint(signatures(sample_tensors()), open_checkpoint(tmp_path))
    assert {name: tensor.name for name, tensor in matched.items()} == {
        name: f"model.decoder.{name}" for name in sample_tensors()
    }


def test_tied_weight_absent_from_the_file(tmp_path):
    tensors = sample_tensors()
    save_file(tensors, str(tmp_path / "model.safetensors"))
    expected = signatures(tensors) | {"head.weight": signatures(tensors)["layers.0.weight"]}
    matched = match_checkpoint(expected, open_checkpoint(tmp_path), tied={"head.weight": "layers.0.weight"})
    assert matched["head.weight"] is matched["layers.0.weight"]


def test_tied_weight_through_a_prefix(plain_checkpoint):
    expected = signatures(sample_tensors("model.")) | {"head.weight": (torch.float32, (4, 3))}
    # `head.weight` is outside the wrapper: only its tie makes it resolvable.
    matched = match_checkpoint(expected, plain_checkpoint, tied={"head.weight": "model.layers.0.weight"})
    assert matched["head.weight"].name == "layers.0.weight"


def test_missing_unexpected_and_mismatched_are_all_reported(tmp_path):
    tensors = sample_tensors(count=12)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    expected = signatures(tensors)
    for index in range(12):
        expected[f"new.{index:02d}"] = (torch.float32, (1,))  # missing: 12
    for index in range(11):
        del expected[f"layers.{index}.bias"]  # unexpected: 11
    expected["steps"] = (torch.int32, (5,))
    expected["layers.11.weight"] = (torch.float32, (4, 99))
    with pytest.raises(tt.CheckpointError) as caught:
        match_checkpoint(expected, open_checkpoint(tmp_path))
    error, message = caught.value, str(caught.value)
    assert isinstance(error, ValueError)
    assert error.missing == [f"new.{index:02d}" for index in range(12)]
    assert sorted(error.unexpected) == sorted(f"layers.{index}.bias" for index in range(11))
    assert sorted(error.mismatched) == ["layers.11.weight", "steps"]
    assert str(tmp_path / "model.safetensors") in message
    assert "12 missing from the checkpoint: 'new.00', " in message and "'new.09' and 2 more" in message
    assert "11 in the checkpoint but not in the model: 'layers." in message and ".bias' and 1 more" in message
    assert "'steps': expected torch.int32 (5,), the file has torch.int64 (5,)" in message
    assert "'layers.11.weight': expected torch.float32 (4, 99), the file has torch.float32 (4, 14)" in message


def test_prefix_applies_to_every_name(plain_checkpoint):
    # Most names sit under the wrapper; the one that does not is missing, not matched as is.
    expected = signatures(sample_tensors("model."))
    expected["steps"] = expected.pop("model.steps")
    with pytest.raises(tt.CheckpointError, match="removing the prefix 'model.'") as caught:
        match_checkpoint(expected, plain_checkpoint)
    assert (caught.value.missing, caught.value.unexpected, caught.value.mismatched) == (["steps"], ["steps"], [])


def test_sharded_checkpoint_names_its_folder(tmp_path):
    save_sharded(tmp_path, sample_tensors())
    with pytest.raises(tt.CheckpointError, match=rf"checkpoint \(3 files in {tmp_path}\) does not match .* 1 tensors"):
        match_checkpoint({"other": (torch.float32, (1,))}, open_checkpoint(tmp_path))


# --- a real architecture ----------------------------------------------------------------------


def test_gpt2_meta_model_matches_its_saved_twin(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=64, bos_token_id=0, eos_token_id=0
    )
    torch.manual_seed(0)
    twin = transformers.GPT2LMHeadModel(config)
    twin.save_pretrained(tmp_path, max_shard_size="100KB")  # sharded, with the tied lm_head left out
    with torch.device("meta"):
        model = transformers.GPT2LMHeadModel(config)
    state = model.state_dict()
    checkpoint = open_checkpoint(tmp_path)
    assert len(checkpoint.files) > 1 and "lm_head.weight" not in checkpoint.tensors

    matched = match_checkpoint(signatures(state), checkpoint, tied={"lm_head.weight": "transformer.wte.weight"})

    assert list(matched) == list(state)
    assert matched["lm_head.weight"] is checkpoint.tensors["transformer.wte.weight"]
    real = {name: tensor for name, tensor in twin.state_dict().items() if name != "lm_head.weight"}
    assert_located(checkpoint, real)

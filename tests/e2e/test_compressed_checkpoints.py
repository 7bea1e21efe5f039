"""tt.quantize_checkpoint and `tensortorrent quantize` (issue 44): a checkpoint's linear layers
written once as int8, then read in place by compiles with weight_format="int8"."""

from __future__ import annotations

import json
import os

import pytest
import torch
from e2e.test_generation import PROMPTS, STOP, left_padded

import tensortorrent as tt
from tensortorrent.cli.main import main
from tiny_transformers import VOCAB, logits, meta_model, saved_model

INT8 = tt.CompileConfig(weight_format="int8")


@pytest.mark.parametrize(("name", "sharded"), [("gpt2", False), ("llama", True)])
def test_a_meta_model_compiles_from_the_int8_checkpoint_as_from_the_model_itself(tmp_path, name, sharded):
    model = saved_model(name, tmp_path / "float", sharded)  # GPT-2's head tied to its embedding: saved once
    folder = tt.quantize_checkpoint(tmp_path / "float", tmp_path / "int8")
    assert sorted(os.listdir(folder)) == ["config.json", "model.safetensors", "quantization.json"]
    record = json.loads((tmp_path / "int8" / "quantization.json").read_text())
    assert record["weight_format"] == "int8" and record["version"] == 1 and record["layers"] > 0
    # Each table's relative error, measured as it was written: int8's steps of a row's largest / 127.
    error = record["weight_error"]
    assert error["tables"] == record["layers"] - (name == "gpt2")  # GPT-2's head shares its embedding's table
    assert 0 < error["mean"] <= error["largest"] < 0.02
    ids = torch.randint(0, VOCAB, (2, 16))
    from_checkpoint = tt.compile(meta_model(name), (ids,), INT8, devices="cpu", checkpoint=folder)
    from_model = tt.compile(model, (ids,), INT8, devices="cpu")
    torch.testing.assert_close(logits(from_checkpoint(ids)), logits(from_model(ids)), rtol=1e-5, atol=1e-5)
    assert "int8 one scale per output channel" in from_checkpoint.explain()
    # Its outputs cannot be compared with the float model's; what was measured of its tables is said.
    assert "holds no float weights" in from_checkpoint.accuracy_note
    assert f"its {error['tables']} tables' relative weight error when written: largest" in from_checkpoint.explain()


def test_generation_reads_the_int8_checkpoint_in_place(tmp_path):
    model = saved_model("qwen3", tmp_path / "float", sharded=False)
    folder = tt.quantize_checkpoint(tmp_path / "float", tmp_path / "int8")
    ids, mask = left_padded(PROMPTS)
    settings = dict(max_length=24, batch_size=3, prompt_buckets=[2, 4], devices="cpu", config=INT8)
    runs = []
    for source, checkpoint in ((meta_model("qwen3"), folder), (model, None)):
        generative = tt.compile_for_generation(source, checkpoint=checkpoint, **settings)
        measured = "relative weight error when written" if checkpoint else "on random prompts of 4 tokens"
        assert measured in generative.explain()
        runs.append(generative.generate(ids, mask, max_new_tokens=8, eos_token_id=STOP, pad_token_id=0))
        generative.close()
    torch.testing.assert_close(runs[0], runs[1], rtol=0, atol=0)


def test_a_float_checkpoint_with_weight_format_says_how_to_write_an_int8_one(tmp_path):
    saved_model("llama", tmp_path / "float", sharded=False)
    ids = torch.zeros((1, 8), dtype=torch.long)
    with pytest.raises(tt.CheckpointError, match="holds float weights .*tt.quantize_checkpoint"):
        tt.compile(meta_model("llama"), (ids,), INT8, devices="cpu", checkpoint=tmp_path / "float")


def test_a_failed_quantize_leaves_nothing_and_bad_arguments_name_what_was_expected(tmp_path):
    saved_model("llama", tmp_path / "float", sharded=False)
    with pytest.raises(tt.CheckpointError, match="does not match"):
        tt.quantize_checkpoint(tmp_path / "float", tmp_path / "out", model=meta_model("gpt2"))
    assert os.listdir(tmp_path) == ["float"]  # no dst, no partial folder
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("x")
    with pytest.raises(tt.InvalidArgumentError, match="expected a new or empty folder"):
        tt.quantize_checkpoint(tmp_path / "float", tmp_path / "taken")
    with pytest.raises(tt.InvalidArgumentError, match="expected 'int8' or 'int4', got 'int3'"):
        tt.quantize_checkpoint(tmp_path / "float", tmp_path / "out", weight_format="int3")
    os.remove(tmp_path / "float" / "config.json")
    with pytest.raises(tt.InvalidArgumentError, match="pass model="):
        tt.quantize_checkpoint(tmp_path / "float", tmp_path / "out")


def test_the_quantize_command_writes_the_folder(tmp_path, capsys):
    saved_model("gpt2", tmp_path / "float", sharded=False)
    assert main(["quantize", str(tmp_path / "float"), str(tmp_path / "int8")]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {tmp_path / 'int8'} (")
    assert main(["quantize", str(tmp_path / "float"), str(tmp_path / "int8")]) == 2  # not empty now
    assert "expected a new or empty folder" in capsys.readouterr().err

"""A generative module saved and loaded back (issue 43): one artifact holding every
program and the weights once, the tokens of the module saved, in RAM or streamed."""

from __future__ import annotations

import json
import os

import pytest
import torch
import transformers
from e2e.test_generation import PROMPTS, STOP, hugging_face, left_padded
from tiny_tokenizer import trained_tokenizer

import tensortorrent as tt
from tensortorrent.planning.fit import weight_bytes
from tiny_transformers import TRANSFORMERS_5, built

SETTINGS = dict(max_new_tokens=8, eos_token_id=STOP, pad_token_id=0)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    torch.manual_seed(0)
    model = built("llama")
    generative = tt.compile_for_generation(model, max_length=16, batch_size=2, prompt_buckets=[4], devices="cpu")
    directory = generative.save(tmp_path_factory.mktemp("artifact") / "llama", tokenizer=trained_tokenizer())
    generative.close()
    return model, directory


def test_one_artifact_holds_every_program_the_weights_once_and_the_tokenizer(saved):
    model, directory = saved
    files = sorted(os.listdir(directory))
    assert [name for name in files if name.endswith(".safetensors")] == ["weights.safetensors"]
    assert {"decode.pt2", "prefill-4.pt2", "decode.manifest.json", "prefill-4.manifest.json"} <= set(files)
    assert {"tokenizer.json", "tokenizer_config.json", "integrity.json"} <= set(files)
    # The weights once, not once per program, and no KV cache (loading makes it).
    assert os.path.getsize(os.path.join(directory, "weights.safetensors")) < 1.1 * weight_bytes(model)
    with open(os.path.join(directory, "manifest.json"), encoding="utf-8") as handle:
        manifest = json.load(handle)
    assert manifest["format"] == "tensortorrent-generation" and manifest["tokenizer"] is True
    assert [program["length"] for program in manifest["programs"]] == [1, 4]
    per_layer = 3 if TRANSFORMERS_5 else 2  # keys, values, and on 5 the write position
    assert len(manifest["cache_buffers"]) == per_layer * model.config.num_hidden_layers


@pytest.mark.parametrize("budget", [None, "half the weights"])
def test_a_loaded_module_generates_the_tokens_of_the_one_saved(saved, budget):
    model, directory = saved
    config = tt.CompileConfig(ram_budget_bytes=weight_bytes(model) // 2) if budget else None
    loaded = tt.load_compiled(directory, config=config)
    assert isinstance(loaded, tt.GenerativeModule)
    assert (loaded.batch_size, loaded.max_length, loaded.prompt_lengths) == (2, 16, [4])
    assert all(program.streams_weights == bool(budget) for program in loaded.programs.values())
    ids, mask = left_padded(PROMPTS[:2])
    for prompts in (PROMPTS[:1], PROMPTS[:2]):  # a second generation reuses the cache the first wrote
        ids, mask = left_padded(prompts)
        ours = loaded.generate(ids, mask, **SETTINGS)
        torch.testing.assert_close(ours, hugging_face(model, ids, mask, max_new_tokens=8), rtol=0, atol=0)
    assert "replayed" in loaded.programs[1].explain() or budget
    loaded.close()


def test_a_loaded_modules_programs_share_one_set_of_weights_and_one_cache(saved):
    _, directory = saved
    loaded = tt.load_compiled(directory)
    tensors = [dict(program.named_buffers()) | dict(program.named_parameters()) for program in loaded.programs.values()]
    shared = set(tensors[0]) & set(tensors[1])
    assert any("cache" in name for name in shared) and any("weight" in name for name in shared)
    for name in shared:
        assert tensors[0][name].data_ptr() == tensors[1][name].data_ptr(), name
    loaded.close()


def test_a_damaged_generative_artifact_is_refused_naming_the_file(saved, tmp_path):
    _, directory = saved
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in os.listdir(directory):
        data = open(os.path.join(directory, name), "rb").read()
        if name == "prefill-4.manifest.json":
            data = data.replace(b'"model_name"', b'"model_nam"')
        (copy / name).write_bytes(data)
    with pytest.raises(tt.ArtifactError, match=r"prefill-4.manifest.json: size \d+ bytes, expected \d+"):
        tt.load_compiled(copy)
    with pytest.raises(tt.ArtifactError, match="prefill-4.manifest.json: missing field 'model_name'"):
        tt.load_compiled(copy, verify_integrity=False)


def test_the_command_prints_the_tokens_as_they_come_as_text_or_ids(saved, capsys):
    from tensortorrent.cli.main import main

    model, directory = saved
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)  # the one saved (training is not repeatable)
    prompt = torch.tensor([tokenizer("hello world")["input_ids"]])
    with torch.no_grad():
        expected = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=5, do_sample=False)
    new = expected[0, prompt.shape[1] :].tolist()
    assert main(["generate", str(directory), "--prompt", "hello world", "--max-new-tokens", "5"]) == 0
    assert capsys.readouterr().out == tokenizer.decode(new, skip_special_tokens=True) + "\n"
    ids = ",".join(str(i) for i in prompt[0].tolist())
    assert main(["generate", str(directory), "--ids", ids, "--max-new-tokens", "5"]) == 0
    assert capsys.readouterr().out.split() == [str(token) for token in new]
    assert main(["generate", str(directory), "--ids", "1,x"]) == 2
    assert "--ids: expected token ids joined by commas, got '1,x'" in capsys.readouterr().err

"""tt.compile(meta_model, ..., checkpoint=...): weights read in place from safetensors checkpoints."""

from __future__ import annotations

import os
import re
import textwrap

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file
from torch import nn

import tensortorrent as tt
from conftest import eager_outputs, rss_growth
from tensortorrent.planning import weights_on_disk
from tiny_transformers import DECODER, MODELS, VOCAB, built, logits, meta_model, saved_model


def weight_bytes(model: nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in model.state_dict().values())


@pytest.mark.parametrize("sharded", [False, True], ids=["one-file", "sharded"])
@pytest.mark.parametrize("name", list(MODELS))
def test_a_meta_model_runs_from_its_checkpoint_like_eager(tmp_path, name, sharded):
    eager = saved_model(name, tmp_path, sharded)
    files = sorted(p.name for p in tmp_path.glob("*.safetensors"))
    assert (len(files) > 1) == sharded
    if name == "gpt2":  # the tied head is saved once, under the embedding's name
        assert not any("lm_head.weight" in load_file(tmp_path / f) for f in files)
    ids = torch.randint(0, VOCAB, (1, 8))
    expected = logits(eager_outputs(eager, (ids,)))
    total = weight_bytes(eager)
    model = meta_model(name)
    for fraction in (3, 2):
        compiled = tt.compile(
            model, (ids,), checkpoint=tmp_path, config=tt.CompileConfig(ram_budget_bytes=total // fraction)
        )
        for _ in range(2):  # streamed weights are read again on every call
            torch.testing.assert_close(logits(compiled(ids)), expected)
            assert 0 < compiled.last_report.bytes_read and compiled.last_peak_bytes["ram"] <= total // fraction
    assert all(p.is_meta for p in model.parameters()), "the caller's model keeps its own (meta) weights"
    assert "region costs measured by a profiling call" in compiled.explain()
    assert "regions as a profiling call computed them" in compiled.explain()


def test_the_profiling_calls_run_without_autograd_as_inference_calls_do(tmp_path, monkeypatch):
    from tensortorrent.runtime import streamed_profile

    eager = saved_model("llama", tmp_path, sharded=False)
    grad_modes = []
    run = streamed_profile.PlaneProgram.run

    def recording(self, *args, **kwargs):
        grad_modes.append(torch.is_grad_enabled())
        return run(self, *args, **kwargs)

    monkeypatch.setattr(streamed_profile.PlaneProgram, "run", recording)
    config = tt.CompileConfig(ram_budget_bytes=weight_bytes(eager) // 2)
    assert torch.is_grad_enabled()
    tt.compile(meta_model("llama"), (torch.randint(0, VOCAB, (1, 8)),), checkpoint=tmp_path, config=config)
    assert grad_modes == [False, False]


def test_without_a_budget_every_weight_is_read_once(tmp_path):
    eager = saved_model("llama", tmp_path, sharded=True)
    ids = torch.randint(0, VOCAB, (2, 8))
    compiled = tt.compile(meta_model("llama"), (ids,), checkpoint=str(tmp_path / "model.safetensors.index.json"))
    torch.testing.assert_close(logits(compiled(ids)), logits(eager_outputs(eager, (ids,))))
    assert compiled.last_report.bytes_read == 0


def test_names_match_through_a_wrapper_module(tmp_path):
    eager = saved_model("llama", tmp_path, sharded=False)

    class Wrapper(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.model = inner

        def forward(self, ids):
            return self.model(ids).logits

    ids = torch.randint(0, VOCAB, (1, 8))
    compiled = tt.compile(Wrapper(meta_model("llama")), (ids,), checkpoint=[tmp_path / "model.safetensors"])
    torch.testing.assert_close(compiled(ids), logits(eager_outputs(eager, (ids,))))


def test_a_real_model_takes_the_checkpoints_weights(tmp_path):
    eager = saved_model("gpt2", tmp_path, sharded=False)
    other = built("gpt2")  # other random weights
    ids = torch.randint(0, VOCAB, (1, 8))
    compiled = tt.compile(other, (ids,), checkpoint=tmp_path / "model.safetensors")
    torch.testing.assert_close(logits(compiled(ids)), logits(eager_outputs(eager, (ids,))))


def test_a_checkpoint_that_does_not_fit_the_model_names_every_problem(tmp_path):
    saved_model("llama", tmp_path, sharded=False)
    tensors = load_file(tmp_path / "model.safetensors")
    del tensors["model.norm.weight"]
    tensors["model.layers.0.mlp.up_proj.weight"] = torch.zeros(3, 3)
    tensors["extra.weight"] = torch.zeros(2)
    save_file(tensors, tmp_path / "broken.safetensors")
    ids = torch.randint(0, VOCAB, (1, 8))
    with pytest.raises(tt.CheckpointError) as caught:
        tt.compile(meta_model("llama"), (ids,), checkpoint=tmp_path / "broken.safetensors")
    error = caught.value
    assert error.missing == ["model.norm.weight"] and error.unexpected == ["extra.weight"]
    assert error.mismatched == ["model.layers.0.mlp.up_proj.weight"]
    assert "(3, 3)" in str(error) and "1 missing" in str(error)


def test_an_unsaved_buffer_without_a_value_is_named(tmp_path):
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(8, 8)
            self.register_buffer("scale", torch.ones(8), persistent=False)

        def forward(self, x):
            return self.linear(x) * self.scale

    save_file({"linear.weight": torch.randn(8, 8), "linear.bias": torch.randn(8)}, tmp_path / "w.safetensors")
    with torch.device("meta"):
        model = Scaled()
    with pytest.raises(tt.CheckpointError, match=r"'scale' \(a buffer of .*Scaled.*is not saved in checkpoints"):
        tt.compile(model, (torch.randn(2, 8),), checkpoint=tmp_path / "w.safetensors")
    # With the buffer's value on the CPU, it is used as it is.
    model.scale = torch.full((8,), 2.0)
    compiled = tt.compile(model, (torch.randn(2, 8),), checkpoint=tmp_path / "w.safetensors")
    x = torch.randn(2, 8)
    weights = load_file(tmp_path / "w.safetensors")
    torch.testing.assert_close(compiled(x), (x @ weights["linear.weight"].T + weights["linear.bias"]) * 2.0)


def test_a_checkpoint_streams_from_disk_through_ram_to_a_device_smaller_than_its_weights(tmp_path):
    eager = saved_model("llama", tmp_path, sharded=True)
    total = weight_bytes(eager)
    device = tt.VirtualDevice("vgpu", memory_bytes=total // 2, flops=50e9, link_bandwidth=20e9)
    ids = torch.randint(0, VOCAB, (1, 8))
    model = meta_model("llama")
    config = tt.CompileConfig(ram_budget_bytes=total // 2)
    compiled = tt.compile(model, (ids,), config=config, checkpoint=tmp_path, devices=["vgpu"], machine=device)
    assert set(compiled.region_devices) == {"vgpu"}
    for _ in range(2):
        torch.testing.assert_close(logits(compiled(ids)), logits(eager_outputs(eager, (ids,))))
        records = compiled.last_report.records
        loads = [r for r in records if r.kind == "load"]
        to_device = [r for r in records if r.kind == "copy" and r.device == "vgpu.h2d" and "weights" in r.label]
        assert loads and to_device and compiled.last_report.bytes_read > 0
        assert compiled.last_peak_bytes["vgpu"] <= device.memory_bytes
        assert compiled.last_peak_bytes["ram"] <= total // 2
    assert all(p.is_meta for p in model.parameters())


def test_an_accelerator_is_profiled_from_the_checkpoint_one_region_at_a_time(tmp_path, plugins_from):
    plugins_from("good")  # example:0, a third party's device in host memory
    eager = saved_model("gpt2", tmp_path, sharded=False)
    ids = torch.randint(0, VOCAB, (1, 8))
    compiled = tt.compile(meta_model("gpt2"), (ids,), checkpoint=tmp_path, devices=["example:0"])
    (device,) = compiled._plan.placement.machine.devices
    assert len(device.region_seconds) == compiled.region_count and all(s > 0 for s in device.region_seconds)
    for _ in range(2):
        torch.testing.assert_close(logits(compiled(ids)), logits(eager_outputs(eager, (ids,))))


def test_an_unknown_device_is_named(tmp_path):
    saved_model("gpt2", tmp_path, sharded=False)
    with pytest.raises(tt.InvalidArgumentError, match=r"unknown device 'gpu0'; known: 'cpu'"):
        tt.compile(meta_model("gpt2"), (torch.zeros(1, 4, dtype=torch.long),), checkpoint=tmp_path, devices=["gpu0"])


RSS_CHILD = textwrap.dedent(
    """
    import sys, torch, transformers, tensortorrent as tt

    def peak_rss():
        status = open("/proc/self/status").read()
        return int(status.split("VmHWM:")[1].split()[0]) * 1024

    def llama(hidden, layers, vocab):
        config = transformers.LlamaConfig(
            num_hidden_layers=layers, hidden_size=hidden, intermediate_size=2 * hidden, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=vocab, max_position_embeddings=64, use_cache=False,
        )
        with torch.device("meta"):
            return transformers.LlamaForCausalLM(config)

    small, big, budget = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ids = torch.randint(0, 100, (1, 16))
    # The interpreter, torch, transformers and our code, loaded and warm.
    tt.compile(llama(64, 1, 128), (ids,), checkpoint=small)(ids)
    open("/proc/self/clear_refs", "w").write("5")  # the peak starts again from what is held now
    baseline = peak_rss()
    compiled = tt.compile(llama(512, 8, 8192), (ids,), checkpoint=big, config=tt.CompileConfig(ram_budget_bytes=budget))
    for _ in range(3):
        compiled(ids)
    print(baseline, peak_rss())
    """
)

# What compiling from a checkpoint may hold beyond its budget (docs/budgets.md).
COMPILE_OVERHEAD = 40 << 20


def test_compiling_and_running_from_a_checkpoint_twice_the_budget_stays_within_it(tmp_path):
    torch.manual_seed(0)
    for name, hidden, layers, vocab in (("small", 64, 1, 128), ("big", 512, 8, 8192)):
        config = dict(DECODER, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers)
        transformers.LlamaForCausalLM(transformers.LlamaConfig(**dict(config, vocab_size=vocab))).save_pretrained(
            tmp_path / name, max_shard_size="20MB"
        )
    weights = sum(p.stat().st_size for p in (tmp_path / "big").glob("*.safetensors"))
    budget = weights // 2
    grew = rss_growth(RSS_CHILD, tmp_path / "small", tmp_path / "big", budget)
    assert grew <= budget + COMPILE_OVERHEAD, f"grew {grew} bytes for a {budget}-byte budget"


def test_a_module_compiled_from_a_checkpoint_saves_its_weights_into_the_artifact(tmp_path):
    eager = saved_model("llama", tmp_path / "checkpoint", sharded=True)
    ids = torch.randint(0, VOCAB, (1, 8))
    budget = tt.CompileConfig(ram_budget_bytes=weight_bytes(eager) // 2)
    compiled = tt.compile(meta_model("llama"), (ids,), checkpoint=tmp_path / "checkpoint", config=budget)
    compiled.save(tmp_path / "artifact")  # copied a tensor at a time, not read whole
    expected = logits(eager_outputs(eager, (ids,)))
    for config in (None, budget):
        loaded = tt.load_compiled(tmp_path / "artifact", config=config)
        torch.testing.assert_close(logits(loaded(ids)), expected)


def test_an_artifact_saved_by_reference_reads_the_checkpoint_and_checks_it(tmp_path):
    checkpoint = tmp_path / "checkpoint"
    eager = saved_model("llama", checkpoint, sharded=True)
    ids = torch.randint(0, VOCAB, (1, 8))
    budget = tt.CompileConfig(ram_budget_bytes=weight_bytes(eager) // 2)
    compiled = tt.compile(meta_model("llama"), (ids,), checkpoint=checkpoint, config=budget)
    compiled.save(tmp_path / "artifact", weights="reference")
    copied = (tmp_path / "artifact" / "weights.safetensors").stat().st_size
    assert copied < weight_bytes(eager) // 20, "only what the checkpoint lacks is copied"
    expected = logits(eager_outputs(eager, (ids,)))
    for config in (None, budget):  # read whole, or streamed from the checkpoint's files
        loaded = tt.load_compiled(tmp_path / "artifact", config=config)
        torch.testing.assert_close(logits(loaded(ids)), expected)
    shard = sorted(checkpoint.glob("*.safetensors"))[1]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(tt.ArtifactError, match=re.escape(str(shard)) + ".*fails its sha256"):
        tt.load_compiled(tmp_path / "artifact")
    shard.write_bytes(bytes(data[:-1]))
    with pytest.raises(tt.ArtifactError, match=re.escape(str(shard)) + ".*changed"):
        tt.load_compiled(tmp_path / "artifact", verify_integrity=False)
    shard.rename(tmp_path / "moved.safetensors")
    with pytest.raises(tt.ArtifactError, match=re.escape(str(shard)) + ".*gone"):
        tt.load_compiled(tmp_path / "artifact")


def test_saving_by_reference_needs_weights_in_files(tmp_path):
    model = nn.Linear(4, 4)
    compiled = tt.compile(model, (torch.randn(2, 4),))
    with pytest.raises(tt.InvalidArgumentError, match="weights='reference' needs weights read from files"):
        compiled.save(tmp_path / "artifact", weights="reference")
    with pytest.raises(tt.InvalidArgumentError, match="expected 'copy' or 'reference', got 'link'"):
        compiled.save(tmp_path / "artifact", weights="link")
    assert not (tmp_path / "artifact").exists()


def test_saving_fails_cleanly_when_the_checkpoint_lost_bytes_since_compile(tmp_path):
    saved_model("gpt2", tmp_path / "checkpoint", sharded=False)
    ids = torch.randint(0, VOCAB, (1, 8))
    compiled = tt.compile(meta_model("gpt2"), (ids,), checkpoint=tmp_path / "checkpoint")
    file = tmp_path / "checkpoint" / "model.safetensors"
    os.truncate(file, file.stat().st_size // 2)
    with pytest.raises(tt.StorageError, match="model.safetensors: ends at byte"):
        compiled.save(tmp_path / "artifact")
    assert not (tmp_path / "artifact").exists() and not any(p.name.startswith(".") for p in tmp_path.iterdir())


@pytest.mark.parametrize("settled", [True, False], ids=["trusted-while-unchanged", "just-written"])
def test_a_checkpoint_changed_after_compile_fails_the_call_until_it_is_good_again(tmp_path, monkeypatch, settled):
    if settled:  # as if written long ago: while unchanged, its loads skip their checksum pass
        monkeypatch.setattr(weights_on_disk, "SETTLED_NS", 0)
    eager = saved_model("llama", tmp_path, sharded=True)
    ids = torch.randint(0, VOCAB, (1, 8))
    budget = tt.CompileConfig(ram_budget_bytes=weight_bytes(eager) // 2)
    compiled = tt.compile(meta_model("llama"), (ids,), checkpoint=tmp_path, config=budget)
    expected = logits(eager_outputs(eager, (ids,)))
    torch.testing.assert_close(logits(compiled(ids)), expected)
    plane = compiled._plane
    checked = plane.io.stats().ranges_checksummed
    assert checked == 0 if settled else checked > 0, "a file changed within SETTLED_NS is checked on every load"
    files = len(plane.weights.files)
    assert f"Found good when built: {files if settled else 0} of {files} file(s)" in compiled.explain()
    streamed = next(iter(plane.plan.streamed.values()))[0]  # a weight read on every call
    place = plane.weights.ranges[streamed.slot]
    path, offset = plane.weights.path_of(place), place.offset + place.nbytes // 2
    with open(path, "r+b") as file:  # changed in place: same size, other bytes
        file.seek(offset)
        good = file.read(1)
        file.seek(offset)
        file.write(bytes([good[0] ^ 0xFF]))
    with pytest.raises(tt.StorageError, match=re.escape(os.path.basename(path)) + ".*fail their crc32c"):
        compiled(ids)
    with open(path, "r+b") as file:
        file.seek(offset)
        file.write(good)
    torch.testing.assert_close(logits(compiled(ids)), expected)


def test_loads_of_unaligned_checkpoint_tensors_go_past_the_page_cache(tmp_path):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**dict(DECODER, hidden_size=256, intermediate_size=512))
    eager = transformers.LlamaForCausalLM(config).eval()
    eager.save_pretrained(tmp_path)  # tensors at 8-byte offsets, as Hugging Face writes them
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    ids = torch.randint(0, VOCAB, (1, 8))
    budget = tt.CompileConfig(ram_budget_bytes=weight_bytes(eager) // 3)
    compiled = tt.compile(model, (ids,), checkpoint=tmp_path, config=budget)
    torch.testing.assert_close(logits(compiled(ids)), logits(eager_outputs(eager, (ids,))))
    io = compiled._plane.io
    if "O_DIRECT" in io.direct_fallback_reason:
        pytest.skip(f"this file system refuses O_DIRECT: {io.direct_fallback_reason}")
    stats = io.stats()
    # Each buffer a load writes sits at its file offset's phase modulo 4096: only each
    # tensor's unaligned head and tail (under 4 KiB each) go through the page cache.
    assert stats.direct_bytes > 0.8 * stats.bytes_read, stats


def test_a_checkpoint_over_the_budget_with_disk_streaming_refused_is_an_error(tmp_path):
    eager = saved_model("gpt2", tmp_path, sharded=False)
    config = tt.CompileConfig(ram_budget_bytes=weight_bytes(eager) // 2, allow_disk_streaming=False)
    with pytest.raises(tt.MemoryCapacityError, match=r"ram_budget_bytes=\d+ .*allow_disk_streaming=False"):
        tt.compile(meta_model("gpt2"), (torch.zeros(1, 4, dtype=torch.long),), checkpoint=tmp_path, config=config)


def test_an_exported_program_compiles_with_its_own_weights_and_inputs():
    torch.manual_seed(0)
    model = built("llama")
    ids = torch.randint(0, VOCAB, (1, 8))
    compiled = tt.compile(torch.export.export(model, (ids,)))  # its example inputs serve
    torch.testing.assert_close(logits(compiled(ids)), logits(eager_outputs(model, (ids,))))


def test_an_exported_program_takes_its_weights_from_a_checkpoint(tmp_path):
    eager = saved_model("llama", tmp_path, sharded=True)
    other = built("llama")  # other random weights, not used
    ids = torch.randint(0, VOCAB, (1, 8))
    exported = torch.export.export(other, (ids,))
    config = tt.CompileConfig(ram_budget_bytes=weight_bytes(eager) // 2)
    compiled = tt.compile(exported, (ids,), checkpoint=tmp_path, config=config)
    torch.testing.assert_close(logits(compiled(ids)), logits(eager_outputs(eager, (ids,))))
    assert compiled.last_report.bytes_read > 0


def test_a_pt2_file_is_opened_only_as_a_weightless_program(tmp_path):
    from tensortorrent.artifact.program_archive import program_bytes

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).eval()
    x = torch.randn(4, 16)
    exported = torch.export.export(model, (x,))
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, tmp_path / "w.safetensors")
    (tmp_path / "graph.pt2").write_bytes(program_bytes(exported))
    compiled = tt.compile(str(tmp_path / "graph.pt2"), (x,), checkpoint=tmp_path / "w.safetensors")
    torch.testing.assert_close(compiled(x), eager_outputs(model, (x,)))
    torch.export.save(exported, tmp_path / "with_weights.pt2")  # holds tensor data: refused unread
    with pytest.raises(tt.UnsafeArtifactError, match="weights come only from safetensors"):
        tt.compile(str(tmp_path / "with_weights.pt2"), (x,), checkpoint=tmp_path / "w.safetensors")
    with pytest.raises(tt.InvalidArgumentError, match="pass checkpoint="):
        tt.compile(str(tmp_path / "graph.pt2"), (x,))


def test_an_artifacts_program_runs_from_its_weights_file_which_holds_its_constants(tmp_path):
    torch.manual_seed(0)
    model = built("llama")
    ids = torch.randint(0, VOCAB, (1, 8))
    tt.compile(model, (ids,)).save(tmp_path / "artifact")
    program = str(tmp_path / "artifact" / "program.pt2")  # holds no tensor data: rotary frequencies neither
    compiled = tt.compile(program, (ids,), checkpoint=tmp_path / "artifact" / "weights.safetensors")
    torch.testing.assert_close(logits(compiled(ids)), logits(eager_outputs(model, (ids,))))
    saved_model("llama", tmp_path / "hf", sharded=False)  # Hugging Face saves no rotary frequencies
    with pytest.raises(tt.CheckpointError, match=r"inv_freq.* has no value, .* add it to the checkpoint"):
        tt.compile(program, (ids,), checkpoint=tmp_path / "hf")


def test_a_meta_model_without_a_checkpoint_is_refused_before_export():
    with pytest.raises(tt.InvalidArgumentError, match=r"on the meta device .* pass checkpoint="):
        tt.compile(meta_model("gpt2"), (torch.zeros(1, 4, dtype=torch.long),))


def test_an_exported_gpt2_keeps_its_tied_head_tied_to_the_saved_embedding(tmp_path):
    eager = saved_model("gpt2", tmp_path, sharded=False)
    ids = torch.randint(0, VOCAB, (1, 8))
    exported = torch.export.export(built("gpt2"), (ids,))
    compiled = tt.compile(exported, checkpoint=tmp_path)
    torch.testing.assert_close(logits(compiled(ids)), logits(eager_outputs(eager, (ids,))))


def test_saving_by_reference_refuses_a_checkpoint_changed_since_compile(tmp_path):
    saved_model("gpt2", tmp_path / "checkpoint", sharded=False)
    ids = torch.randint(0, VOCAB, (1, 8))
    compiled = tt.compile(meta_model("gpt2"), (ids,), checkpoint=tmp_path / "checkpoint")
    file = tmp_path / "checkpoint" / "model.safetensors"
    data = bytearray(file.read_bytes())
    data[-20] ^= 0xFF  # within the last tensor: its CRC-32C, taken at compile, no longer matches
    file.write_bytes(bytes(data))
    with pytest.raises(tt.StorageError, match="model.safetensors: .* fails its CRC-32C: the file changed"):
        compiled.save(tmp_path / "artifact", weights="reference")
    assert not (tmp_path / "artifact").exists() and not any(p.name.startswith(".") for p in tmp_path.iterdir())

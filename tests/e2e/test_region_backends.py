"""Regions compiled by inductor (CompileConfig.region_backend), the numerics check, and
artifacts of such modules, on real architectures and every kind of plan."""

from __future__ import annotations

import json
import os

import pytest
import torch
from torch import nn

import tensortorrent as tt
from conftest import eager_outputs
from tiny_transformers import MODELS, VOCAB, bert, logits, resnet

pytest.importorskip("transformers")


def mlp(width: int = 64, depth: int = 4) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[layer for _ in range(depth) for layer in (nn.Linear(width, width), nn.GELU())]).eval()


def decoder(name: str) -> nn.Module:
    torch.manual_seed(0)
    cls, config = MODELS[name]
    return cls(config()).eval()


CASES = {
    "gpt2": (lambda: decoder("gpt2"), lambda: (torch.randint(0, VOCAB, (2, 12)),)),
    "llama": (lambda: decoder("llama"), lambda: (torch.randint(0, VOCAB, (2, 12)),)),
    "bert": (bert, lambda: (torch.randint(0, 128, (2, 12)),)),
    "resnet": (resnet, lambda: (torch.randn(2, 3, 32, 32),)),
}


def assert_close_to_eager(compiled, model, args):
    got, expected = compiled(*args), eager_outputs(model, args)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("name", list(CASES))
def test_inductor_regions_match_eager_on_real_architectures(name):
    build, inputs = CASES[name]
    torch.manual_seed(0)
    model, args = build(), inputs()
    compiled = tt.compile(model, args, config=tt.CompileConfig(region_backend="inductor"), devices="cpu")
    assert_close_to_eager(compiled, model, args)
    kernels = compiled._runner.kernels
    assert all(k.compiled for k in kernels)
    text = compiled.explain()
    assert f"Region backends (inductor): {len(kernels)} of {len(kernels)} region(s) run inductor's code" in text
    assert "Numerics: checked against eager PyTorch on the example inputs" in text


def test_compiling_the_same_model_again_takes_inductors_code_from_its_cache():
    from torch._dynamo.utils import counters

    model, x = mlp(width=40), torch.randn(3, 40)
    config = tt.CompileConfig(region_backend="inductor")
    tt.compile(model, (x,), config=config)
    hits = counters["inductor"]["fxgraph_cache_hit"]
    tt.compile(mlp(width=40), (x,), config=config)
    assert counters["inductor"]["fxgraph_cache_hit"] == hits + 1  # its one region


def test_auto_keeps_the_faster_backend_per_region_and_shows_both_times():
    model, x = mlp(), torch.randn(8, 64)
    compiled = tt.compile(model, (x,), config=tt.CompileConfig(region_backend="auto", max_region_nodes=2))
    assert compiled.region_count > 1
    choices = compiled.artifact_parts().region_backends.choices
    for choice, kernel in zip(choices, compiled._runner.kernels):
        assert choice.eager_s is not None and choice.inductor_s is not None and choice.compile_s is not None
        assert choice.backend == ("inductor" if choice.inductor_s < choice.eager_s else "eager")
        assert kernel.compiled == (choice.backend == "inductor")
    assert "eager ms inductor ms" in compiled.explain()
    assert_close_to_eager(compiled, model, (x,))


def test_auto_times_each_region_on_the_values_a_call_on_the_example_inputs_computes(monkeypatch):
    """Not on random values of their shapes: the model's weights and the activations of
    the example inputs (a kernel's speed can depend on them: NaNs, denormals)."""
    from tensortorrent.runtime import region_backends

    timed_outputs = []

    def record(eager, compiled, sync=None):
        timed_outputs.append(eager())
        return 2.0, 1.0

    monkeypatch.setattr(region_backends, "time_side_by_side", record)
    model, x = mlp(), torch.randn(8, 64)
    compiled = tt.compile(model, (x,), config=tt.CompileConfig(region_backend="auto", max_region_nodes=2))
    assert len(timed_outputs) == compiled.region_count > 1
    (last,) = timed_outputs[-1]
    torch.testing.assert_close(last, eager_outputs(model, (x,)), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("model_forward_faster", [True, False])
def test_auto_on_a_one_region_plan_keeps_the_models_own_forward_where_it_is_faster(monkeypatch, model_forward_faster):
    """The direct path of an eager plan calls the model's forward: "auto" compares inductor's
    region with that (the region's own eager graph is timed first)."""
    from tensortorrent.runtime import region_backends

    timings = iter([(2.0, 1.0), (1.0, 2.0) if model_forward_faster else (2.0, 1.0)])  # (eager s, compiled s)
    monkeypatch.setattr(region_backends, "time_side_by_side", lambda eager, compiled, sync=None: next(timings))
    model, x = mlp(depth=1), torch.randn(4, 64)
    compiled = tt.compile(model, (x,), config=tt.CompileConfig(region_backend="auto"))
    assert compiled.uses_direct_path
    (choice,) = compiled.artifact_parts().region_backends.choices
    assert compiled._runner.kernels[0].compiled is not model_forward_faster
    assert compiled._runs_model_forward is model_forward_faster
    assert ("the model's own forward ran faster" in compiled.explain()) is model_forward_faster
    assert_close_to_eager(compiled, model, (x,))


def test_a_single_region_runs_inductors_code_on_the_direct_path():
    model, x = mlp(depth=1), torch.randn(4, 64)
    compiled = tt.compile(model, (x,), config=tt.CompileConfig(region_backend="inductor"))
    assert compiled.uses_direct_path and compiled.region_count == 1
    assert compiled._runner.kernels[0].compiled
    assert_close_to_eager(compiled, model, (x,))


def test_inductor_regions_on_virtual_devices():
    model, x = mlp(), torch.randn(8, 64)
    device = tt.VirtualDevice("dev", memory_bytes=64 << 20, flops=1e12, link_bandwidth=10e9)
    compiled = tt.compile(
        model,
        (x,),
        devices=["cpu", "dev"],
        machine=[device],
        config=tt.CompileConfig(region_backend="inductor", max_region_nodes=2),
    )
    assert "dev" in compiled.region_devices
    assert_close_to_eager(compiled, model, (x,))


def test_inductor_regions_with_weights_streamed_from_disk(tmp_path):
    model, x = mlp(width=256), torch.randn(4, 256)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    config = tt.CompileConfig(region_backend="inductor", ram_budget_bytes=weights // 2, spill_dir=str(tmp_path))
    compiled = tt.compile(model, (x,), config=config)
    assert compiled.streams_weights
    assert any(k.compiled for k in compiled._runner.kernels)
    assert_close_to_eager(compiled, model, (x,))


def test_an_artifact_holds_no_compiled_code_and_loading_compiles_again(tmp_path):
    model, x = mlp(), torch.randn(8, 64)
    compiled = tt.compile(model, (x,), config=tt.CompileConfig(region_backend="auto", max_region_nodes=2))
    saved = [c.backend for c in compiled.artifact_parts().region_backends.choices]
    compiled.save(tmp_path / "artifact")
    files = sorted(os.listdir(tmp_path / "artifact"))
    assert not [f for f in files if f.endswith((".so", ".cpp", ".py", ".pyc"))], files
    manifest = json.loads((tmp_path / "artifact" / "manifest.json").read_text())
    assert [c["backend"] for c in manifest["region_backends"]] == saved

    loaded = tt.load_compiled(tmp_path / "artifact")
    assert [k.compiled for k in loaded._runner.kernels] == [b == "inductor" for b in saved]
    assert_close_to_eager(loaded, model, (x,))
    # Loaded with another config, the regions follow that config.
    eager = tt.load_compiled(tmp_path / "artifact", config=tt.CompileConfig(max_region_nodes=2))
    assert not any(k.compiled for k in eager._runner.kernels)


def test_a_checkpoint_compile_with_inductor_regions(tmp_path):
    from tiny_transformers import meta_model, saved_model

    model = saved_model("llama", tmp_path, sharded=False)
    ids = torch.randint(0, VOCAB, (1, 8))
    compiled = tt.compile(
        meta_model("llama"), (ids,), checkpoint=tmp_path, config=tt.CompileConfig(region_backend="inductor")
    )
    assert any(k.compiled for k in compiled._runner.kernels)
    torch.testing.assert_close(logits(compiled(ids)), logits(eager_outputs(model, (ids,))), atol=1e-4, rtol=1e-3)
    assert "Numerics: not checked: the weights are read from a checkpoint" in compiled.explain()
    with pytest.raises(tt.UnsupportedFeatureError, match="validate_numerics=True"):
        tt.compile(meta_model("llama"), (ids,), checkpoint=tmp_path, config=tt.CompileConfig(validate_numerics=True))


def test_a_wrong_compiled_region_raises_numerics_error_naming_the_output(monkeypatch):
    """A region whose compiled code is off by 0.01 (injected) fails the check."""
    real = torch._inductor.compile

    def off_by_a_little(module, inputs, options=None):
        compiled = real(module, inputs, options)
        return lambda *args: [t + 0.01 for t in compiled(*args)]

    monkeypatch.setattr(torch._inductor, "compile", off_by_a_little)
    model, x = mlp(), torch.randn(8, 64)
    with pytest.raises(tt.NumericsError, match=r"the output differs from eager PyTorch by up to 0\.01") as caught:
        tt.compile(model, (x,), config=tt.CompileConfig(region_backend="inductor"))
    assert caught.value.output == "the output"
    assert caught.value.max_abs_diff == pytest.approx(0.01, abs=1e-4)
    assert (caught.value.atol, caught.value.rtol) == (1e-4, 1e-3)
    # Looser tolerances given, the same module builds; validate_numerics=False skips the check.
    tt.compile(model, (x,), config=tt.CompileConfig(region_backend="inductor", atol=0.1, rtol=0.0))
    compiled = tt.compile(model, (x,), config=tt.CompileConfig(region_backend="inductor", validate_numerics=False))
    assert "Numerics" not in compiled.explain()


def test_a_region_inductor_cannot_compile_stays_eager(monkeypatch, caplog):
    def refuse(module, inputs, options=None):
        raise RuntimeError("no code for this region")

    monkeypatch.setattr(torch._inductor, "compile", refuse)
    model, x = mlp(), torch.randn(8, 64)
    compiled = tt.compile(model, (x,), config=tt.CompileConfig(region_backend="inductor"))
    assert not any(k.compiled for k in compiled._runner.kernels)
    assert "inductor failed: RuntimeError: no code for this region" in compiled.explain()
    assert "stays eager" in caplog.text
    assert_close_to_eager(compiled, model, (x,))


def test_the_training_program_runs_eager_regions():
    model, x = mlp(), torch.randn(8, 64)
    compiled = tt.compile(model, (x,), config=tt.CompileConfig(region_backend="inductor", allow_training=True))
    assert any(k.compiled for k in compiled._runner.kernels)
    compiled.train()
    compiled(x).sum().backward()
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize(
    ("field", "value", "error", "message"),
    [
        ("region_backend", "tvm", tt.ConfigValueError, "expected one of 'eager', 'inductor', 'auto', got 'tvm'"),
        ("region_backend", 1, tt.ConfigTypeError, "expected a str, got int"),
        ("validate_numerics", "yes", tt.ConfigTypeError, "expected a bool"),
        ("atol", -1.0, tt.ConfigValueError, "expected a finite number >= 0"),
        ("rtol", "1e-3", tt.ConfigTypeError, "expected a number"),
    ],
)
def test_config_fields_are_checked(field, value, error, message):
    with pytest.raises(error, match=f"CompileConfig.{field}: {message}"):
        tt.CompileConfig(**{field: value})


@pytest.mark.parametrize("name", list(CASES))
def test_inductor_regions_on_packed_weights_match_eager_on_real_architectures(name, packed_always_faster):
    """GPT-2's products with their GELU as post-op, Llama's with silu, BERT's, and
    ResNet's convolutions with their norms folded in and the residual sums as post-ops,
    all called from inductor's code."""
    build, inputs = CASES[name]
    torch.manual_seed(0)
    model, args = build(), inputs()
    compiled = tt.compile(model, args, config=tt.CompileConfig(region_backend="inductor"), devices="cpu")
    assert any(c.backend == "inductor" and c.packed_kernels for c in compiled._backends.choices)
    assert_close_to_eager(compiled, model, args)

"""Plans on a CUDA device (skipped without one, saying why): parity with eager for the
spine's architectures in fp32 and bf16, a model over a small VRAM budget whose weights
move to the device on every call with the allocator's peak within the budget plus a
headroom, a cancelled call that leaves no device memory held, regions compiled by
inductor for the GPU, and a GPU plan saved and loaded onto the GPU again."""

from __future__ import annotations

import copy
import gc

import pytest
import torch
import torch.utils._pytree as pytree

import tensortorrent as tt
from conftest import eager_outputs
from tensortorrent.backends.torch_accelerator import TorchAcceleratorBackend

pytestmark = pytest.mark.skipif(
    not TorchAcceleratorBackend("cuda").available(),
    reason="no cuda device: torch.cuda.is_available() is False on this machine",
)
# What torch's kernels allocate beside the plan's buffers (cuBLAS workspaces, a kernel's
# temporaries): the allocator's peak may exceed vram_budget_bytes by this much.
HEADROOM_BYTES = 256 << 20
TOLERANCES = {torch.float32: {"rtol": 1e-4, "atol": 1e-4}, torch.bfloat16: {"rtol": 2e-2, "atol": 2e-2}}


def model_and_inputs(name: str, dtype: torch.dtype):
    from e2e import test_parity_transformers as zoo

    torch.manual_seed(0)
    model = getattr(zoo, name)().to(dtype)
    args, kwargs = zoo.example_inputs(name)
    args = tuple(a.to(dtype) if a.is_floating_point() else a for a in args)
    return model, args, kwargs


def eager_on_cuda(model, args: tuple, kwargs: dict | None):
    """Eager's outputs with the model and inputs on cuda:0, brought back to the CPU: the
    same kernels as the compiled regions (cuDNN convolutions in TF32, bf16 products)."""
    on_device = lambda value: value.to("cuda:0")  # noqa: E731
    model = copy.deepcopy(model).to("cuda:0")
    args = pytree.tree_map_only(torch.Tensor, on_device, args)
    kwargs = pytree.tree_map_only(torch.Tensor, on_device, kwargs or {})
    return pytree.tree_map_only(torch.Tensor, lambda t: t.cpu(), eager_outputs(model, args, kwargs))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", ["gpt2", "bert", "llama", "vit", "resnet"])
def test_parity_with_eager_on_cuda(name, dtype):
    model, args, kwargs = model_and_inputs(name, dtype)
    compiled = tt.compile(model, args, example_kwargs=kwargs, devices=["cuda:0"])
    got = compiled(*args, **(kwargs or {}))
    torch.testing.assert_close(got, eager_on_cuda(model, args, kwargs), **TOLERANCES[dtype])


def test_a_model_over_a_small_vram_budget_copies_its_weights_and_stays_within_it():
    model, args, kwargs = model_and_inputs("llama", torch.float32)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    budget = weights // 2
    config = tt.CompileConfig(vram_budget_bytes=budget)
    compiled = tt.compile(model, args, example_kwargs=kwargs, config=config, devices=["cuda:0"])
    assert not all(compiled._plan.placement.chosen.resident)
    # A first call: each thread that launches a matmul gets its cuBLAS workspace, which
    # torch keeps for good and the budget leaves out (README: what the budget counts).
    compiled(*args, **(kwargs or {}))
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    got = compiled(*args, **(kwargs or {}))
    torch.testing.assert_close(got, eager_outputs(model, args, kwargs), **TOLERANCES[torch.float32])
    assert compiled.last_peak_bytes["cuda:0"] <= budget
    assert torch.cuda.max_memory_allocated() - base <= budget + HEADROOM_BYTES


def test_a_cancelled_call_leaves_no_device_memory_held(hooks):
    from conftest import ProbeChain

    torch.manual_seed(0)
    chain = ProbeChain(stages=4, width=256).eval()
    x = torch.randn(2, 256)
    config = tt.CompileConfig(max_region_nodes=1, vram_budget_bytes=3 * (256 * 256 + 256) * 4)
    compiled = tt.compile(chain, (x,), config=config, devices=["cuda:0"])
    compiled(x)  # cuBLAS's workspace for the program's compute stream, allocated once and kept

    def held_now() -> int:
        gc.collect()
        torch.cuda.synchronize()
        if hasattr(torch._C, "_cuda_clearCublasWorkspaces"):  # a workspace per stream and cuBLAS handle
            torch._C._cuda_clearCublasWorkspaces()
        return torch.cuda.memory_allocated()

    before = held_now()
    hooks.on_probe = lambda tag: compiled.request_cancel() if tag == 1 else None
    with pytest.raises(tt.ExecutionCancelled):
        compiled(x)
    assert held_now() == before
    hooks.on_probe = None
    torch.testing.assert_close(compiled(x), eager_outputs(chain, (x,)))


@pytest.mark.skipif(
    TorchAcceleratorBackend("cuda").available() and torch.cuda.device_count() < 2,
    reason="one cuda device: the several-GPU plan needs two",
)
def test_a_model_over_two_gpus_matches_eager_with_values_crossing_once():
    model, args, kwargs = model_and_inputs("llama", torch.float32)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    # Neither device holds the model, both together do: every region resident on one of them.
    config = tt.CompileConfig(vram_budget_bytes=int(weights * 0.7))
    compiled = tt.compile(model, args, example_kwargs=kwargs, config=config, devices=["cuda:0", "cuda:1"])
    got = compiled(*args, **(kwargs or {}))
    torch.testing.assert_close(got, eager_outputs(model, args, kwargs), **TOLERANCES[torch.float32])
    assert {"cuda:0", "cuda:1"} <= set(compiled.region_devices)
    crossings = [r.device for r in compiled.last_report.records if r.kind == "copy" and "->" in r.device]
    if torch.cuda.can_device_access_peer(0, 1):
        assert crossings, "peers exchange values over their own link"
    else:
        assert not crossings, "without peer access values go through host memory"


def test_a_model_that_fits_takes_the_direct_path_and_replays_a_cuda_graph():
    from e2e.test_virtual_devices import BATCH, WIDTH, Stack

    from tensortorrent.runtime.device_direct import WARM_UP_CALLS

    torch.manual_seed(0)
    model = Stack(layers=4).eval()
    compiled = tt.compile(model, (torch.randn(BATCH, WIDTH),), devices=["cuda:0"])
    assert compiled.uses_direct_path
    for _ in range(WARM_UP_CALLS + 2):
        x = torch.randn(BATCH, WIDTH)
        torch.testing.assert_close(compiled(x), eager_outputs(model, (x,)), **TOLERANCES[torch.float32])
    assert "graph: captured after" in compiled.explain()


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_transformers_on_the_direct_path_match_eager_after_warm_up(name):
    model, args, kwargs = model_and_inputs(name, torch.float32)
    compiled = tt.compile(model, args, example_kwargs=kwargs, devices=["cuda:0"])
    assert compiled.uses_direct_path
    for _ in range(4):  # past the warm-up: replayed where captured, as launched where not
        got = compiled(*args, **(kwargs or {}))
    torch.testing.assert_close(got, eager_outputs(model, args, kwargs), **TOLERANCES[torch.float32])
    assert "graph: " in compiled.explain()


def test_a_checkpoint_over_both_ram_and_vram_budgets_streams_from_disk_to_the_gpu(tmp_path):
    from tiny_transformers import VOCAB, logits, meta_model, saved_model

    eager = saved_model("llama", tmp_path, sharded=True)
    total = sum(t.numel() * t.element_size() for t in eager.state_dict().values())
    config = tt.CompileConfig(ram_budget_bytes=total // 2, vram_budget_bytes=total // 2)
    ids = torch.randint(0, VOCAB, (1, 8))
    compiled = tt.compile(meta_model("llama"), (ids,), config=config, checkpoint=tmp_path, devices=["cuda:0"])
    assert "cuda:0" in compiled.region_devices
    for _ in range(2):
        got = logits(compiled(ids))
        torch.testing.assert_close(got, logits(eager_outputs(eager, (ids,))), **TOLERANCES[torch.float32])
        assert compiled.last_report.bytes_read > 0
        assert compiled.last_peak_bytes["cuda:0"] <= total // 2


@pytest.mark.parametrize("over_budget", [False, True], ids=["resident", "weights-copied-per-call"])
def test_inductor_regions_compile_for_cuda_and_match_eager(over_budget):
    """Regions placed on the GPU run inductor's code compiled for it (runtime/device_kernels.py),
    also where their weights arrive on every call."""
    model, args, kwargs = model_and_inputs("llama", torch.float32)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    config = tt.CompileConfig(region_backend="inductor", vram_budget_bytes=weights // 2 if over_budget else None)
    compiled = tt.compile(model, args, example_kwargs=kwargs, config=config, devices=["cuda:0"])
    got = compiled(*args, **(kwargs or {}))
    torch.testing.assert_close(got, eager_outputs(model, args, kwargs), **TOLERANCES[torch.float32])
    on_gpu = [k.on_devices.choices.get("cuda:0") for k in compiled._runner.kernels]
    assert any(choice is not None and choice.backend == "inductor" for choice in on_gpu), compiled.explain()
    assert "on cuda:0: inductor, compiled in " in compiled.explain()


@pytest.mark.parametrize("name", ["mlp", "branches", "batchnorm", "gpt2", "llama"])
def test_training_on_cuda_steps_like_eager_and_eval_sees_the_steps(name):
    """A training plan on the GPU copies the parameters from RAM on every call and sends
    their gradients back; after SGD steps, eval() sees the stepped weights on the GPU."""
    from e2e.test_training import example, train_side_by_side

    from tensortorrent.planning.placement import region_param_bytes

    model, x = example(name)
    for module in model.modules():  # the GPU draws other dropout masks than the CPU's eager run
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    eager = copy.deepcopy(model)
    config = tt.CompileConfig(allow_training=True, max_region_nodes=3)
    compiled = tt.compile(model, (x,), config=config, devices=["cuda:0"])
    trainer = compiled._trainer
    assert set(trainer.region_devices) == {"cuda:0"}
    resident = trainer._plan.placement.chosen.resident
    assert not any(held and region_param_bytes(trainer._runner, r) for r, held in enumerate(resident))
    make = lambda parameters: torch.optim.SGD(parameters, lr=0.05)  # noqa: E731
    train_side_by_side(compiled, eager, x, make, steps=3, tolerance={"rtol": 1e-3, "atol": 1e-4})


def test_a_plan_on_the_gpu_saves_and_loads_onto_it_again(tmp_path):
    """An artifact records the devices it was compiled for: loading plans onto cuda:0 again
    (under the saved VRAM budget; under a RAM budget too, streaming from the artifact's
    file), or onto the CPU when asked."""
    model, args, kwargs = model_and_inputs("gpt2", torch.float32)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    config = tt.CompileConfig(vram_budget_bytes=weights // 2)
    compiled = tt.compile(model, args, example_kwargs=kwargs, config=config, devices=["cuda:0"])
    path = compiled.save(tmp_path / "gpt2")
    expected = eager_outputs(model, args, kwargs)
    loaded = tt.load_compiled(path)
    assert set(loaded.region_devices) == {"cuda:0"}
    assert not all(loaded._plan.placement.chosen.resident)
    torch.testing.assert_close(loaded(*args, **(kwargs or {})), expected, **TOLERANCES[torch.float32])
    assert loaded.last_peak_bytes["cuda:0"] <= weights // 2
    on_cpu = tt.load_compiled(path, devices="cpu")
    assert set(on_cpu.region_devices) == {"cpu"}
    torch.testing.assert_close(on_cpu(*args, **(kwargs or {})), expected, **TOLERANCES[torch.float32])
    # Under a RAM budget too, the weights stream from the artifact's file to the GPU.
    streamed = tt.load_compiled(
        path, config=tt.CompileConfig(ram_budget_bytes=weights // 2, vram_budget_bytes=weights // 2)
    )
    assert set(streamed.region_devices) == {"cuda:0"}
    for _ in range(2):
        torch.testing.assert_close(streamed(*args, **(kwargs or {})), expected, **TOLERANCES[torch.float32])
        assert streamed.last_report.bytes_read > 0
        assert streamed.last_peak_bytes["cuda:0"] <= weights // 2

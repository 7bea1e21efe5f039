"""The earlier TensorTorrent's public API, as its users call it: ModuleGraph as a module
with default outputs, ModuleNode(inputs=...), CompiledModule.close() and `with`, its
CompileConfig fields named with what replaces them, GraphCaptureError and
CompileConfig.polite()."""

from __future__ import annotations

import gc
import os

import pytest
import torch
from e2e.test_activation_spill import spilling_chain
from e2e.test_virtual_devices import BATCH, WIDTH, Stack, compile_on, fast_small
from torch import nn

import tensortorrent as tt
from conftest import eager_outputs, wait_until
from tensortorrent.hardware import resolve_budgets
from tensortorrent.runtime.plane_call import PlaneCall


def two_linears() -> tuple[nn.Module, nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return nn.Linear(8, 8), nn.Linear(8, 4), torch.randn(3, 8)


def test_a_module_graph_returns_its_last_node_by_default_and_is_a_module():
    encoder, head, x = two_linears()
    graph = tt.ModuleGraph(
        [
            tt.ModuleNode("encoder", encoder, inputs=(tt.GraphInput(0),)),
            tt.ModuleNode("head", head, inputs=[tt.NodeOutput("encoder")]),
        ]
    )
    assert isinstance(graph, nn.Module) and graph.outputs == tt.NodeOutput("head")
    expected = head(encoder(x))
    torch.testing.assert_close(graph(x), expected)  # callable eagerly
    assert {name for name, _ in graph.named_parameters()} == {
        "encoder.weight",
        "encoder.bias",
        "head.weight",
        "head.bias",
    }
    graph.train()
    assert encoder.training and head.training
    graph.eval()
    assert not encoder.training and not head.training
    compiled = tt.compile(graph, (x,))
    torch.testing.assert_close(compiled(x), expected)
    assert graph.nodes[1].inputs == graph.nodes[1].args == (tt.NodeOutput("encoder"),)


def test_a_node_given_both_args_and_inputs_is_refused():
    encoder, _, _ = two_linears()
    with pytest.raises(tt.GraphDefinitionError, match="give args or inputs"):
        tt.ModuleNode("encoder", encoder, (tt.GraphInput(0),), inputs=(tt.GraphInput(0),))


def test_a_module_graph_calling_one_module_twice_shares_its_weights():
    encoder, _, x = two_linears()
    graph = tt.ModuleGraph(
        [
            tt.ModuleNode("first", encoder, inputs=(tt.GraphInput(0),)),
            tt.ModuleNode("again", encoder, inputs=(tt.NodeOutput("first"),)),
        ]
    )
    assert len(list(graph.parameters())) == 2
    torch.testing.assert_close(tt.compile(graph, (x,))(x), encoder(encoder(x)))


def threads_named(prefix: str) -> int:
    """Threads of this process whose name starts with `prefix`. A thread just joined may
    still be listed a moment (the kernel ends it after join returns): compare through
    threads_back_to."""
    count = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                count += comm.read().startswith(prefix)
        except OSError:
            continue  # a thread that ended meanwhile
    return count


def threads_back_to(prefix: str, before: int) -> bool:
    """Whether the threads named `prefix` come back to `before` (within wait_until's 10 s)."""
    return bool(wait_until(lambda: threads_named(prefix) == before))


def open_files_under(folder) -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith(str(folder))
        except OSError:
            continue
    return count


def mapped(address: int) -> bool:
    with open("/proc/self/maps") as maps:
        for line in maps:
            start, end = (int(part, 16) for part in line.split()[0].split("-"))
            if start <= address < end:
                return True
    return False


HUGE_PAGE = 2 << 20  # arenas this large are mappings of their own (smaller ones come from the heap)


def arenas_of(plane) -> list[int]:
    """The addresses of a data plane's host arenas of their own mappings: its residents' and
    a pooled call arena."""
    memory = plane.begin_call(1.0)
    arenas = [address for address, nbytes in memory.host_arenas if nbytes >= HUGE_PAGE]
    plane.end_call(memory)  # the call arena goes back to its pool
    return arenas


@pytest.fixture
def without_gc():
    """The cycle collector off: what close() releases must go at once, not at the next collection."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()


def test_close_releases_arenas_threads_and_spill_files_at_once_and_later_calls_raise(tmp_path, monkeypatch, without_gc):
    monkeypatch.setenv("TT_SPILL_DIR", str(tmp_path))  # the weights cache
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(512, 512), nn.ReLU()) for _ in range(6)]).eval()
    x = torch.randn(64, 512)
    weights = sum(p.numel() * 4 for p in model.parameters())
    threads_before, files_before = threads_named("tt-"), open_files_under(tmp_path)
    streamed = tt.compile(model, (x,), tt.CompileConfig(ram_budget_bytes=weights // 2), devices="cpu")
    torch.testing.assert_close(streamed(x), eager_outputs(model, (x,)))
    streamed.submit(x).result()  # a submit() thread too
    _, spill_x, spilling = spilling_chain(tmp_path)
    spilling(spill_x)
    modules = (streamed, spilling)
    assert streamed._plane.streams and spilling._plane.plan.spilled_bytes > 0
    arenas = [address for module in modules for address in arenas_of(module._plane.plane)]
    assert arenas and all(mapped(address) for address in arenas)
    assert threads_named("tt-") > threads_before and open_files_under(tmp_path) > files_before

    for module in modules:
        module.close()
    assert not any(mapped(address) for address in arenas)
    assert threads_back_to("tt-", threads_before)
    assert open_files_under(tmp_path) == files_before
    with pytest.raises(tt.ModuleClosedError, match="was closed"):
        streamed(x)
    with pytest.raises(tt.ModuleClosedError):
        streamed.submit(x).result()
    streamed.close()  # again: nothing left to release


def test_leaving_a_with_block_closes_the_module_and_its_page_locked_ranges():
    torch.manual_seed(0)
    model = Stack().eval()
    x = torch.randn(BATCH, WIDTH)
    with compile_on(model, ["fast"], machine=[fast_small()]) as compiled:
        torch.testing.assert_close(compiled(x), model(x))
        backend, _ = compiled._plane.devices["fast"]
        assert backend.registered
    assert backend.registered == {}
    with pytest.raises(tt.ModuleClosedError):
        compiled(x)


def test_a_direct_path_module_closes_too():
    encoder, _, x = two_linears()
    with tt.compile(encoder.eval(), (x,), devices="cpu") as compiled:
        assert compiled.uses_direct_path
        torch.testing.assert_close(compiled(x), eager_outputs(encoder, (x,)))
    with pytest.raises(tt.ModuleClosedError):
        compiled(x)


def test_close_asked_from_inside_a_call_ends_that_call_and_releases_after_it(tmp_path, monkeypatch, without_gc):
    # A hook inside the model cannot wait for the call it runs in: the call is cancelled
    # at its next region and the program goes when it ends.
    monkeypatch.setenv("TT_SPILL_DIR", str(tmp_path))
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.ReLU()) for _ in range(4)]).eval()
    x = torch.randn(8, 256)
    weights = sum(p.numel() * 4 for p in model.parameters())
    threads_before = threads_named("tt-")
    streamed = tt.compile(model, (x,), tt.CompileConfig(ram_budget_bytes=weights // 2), devices="cpu")
    assert streamed._plane.streams
    arenas = arenas_of(streamed._plane.plane)
    run_region = PlaneCall._run

    def closing_on_first_region(call, step):
        streamed.close()
        run_region(call, step)

    monkeypatch.setattr(PlaneCall, "_run", closing_on_first_region)
    with pytest.raises(tt.ExecutionCancelled):
        streamed(x)
    assert not any(mapped(address) for address in arenas)
    assert threads_back_to("tt-", threads_before)
    with pytest.raises(tt.ModuleClosedError):
        streamed(x)

    encoder, _, x = two_linears()
    direct = tt.compile(encoder.eval(), (x,), devices="cpu")
    assert direct.uses_direct_path
    encoder.register_forward_hook(lambda *_: direct.close())
    torch.testing.assert_close(direct(x), eager_outputs(encoder, (x,)))  # a direct call runs to its end
    with pytest.raises(tt.ModuleClosedError):
        direct(x)


@pytest.mark.parametrize(
    "field, value, hint",
    [
        ("allow_gpu", False, r'devices="cpu"'),
        ("allow_nvme_streaming", True, "use allow_disk_streaming"),
        ("allow_concurrent_regions", False, "use max_concurrent_regions=1"),
        ("use_torch_compile", True, 'use region_backend="inductor"'),
        ("measure_regions", True, "nothing to set: every region is timed"),
        ("profile_level", 2, "nothing to set: every region is timed"),
        ("max_region_node", 4, "did you mean 'max_region_nodes'"),
    ],
)
def test_a_config_field_we_lack_names_what_to_use_instead(field, value, hint):
    with pytest.raises(tt.ConfigTypeError, match=rf"CompileConfig has no field '{field}'.*{hint}") as caught:
        tt.CompileConfig(**{field: value})
    assert isinstance(caught.value, TypeError)


def test_graph_capture_error_is_the_capture_error():
    assert tt.GraphCaptureError is tt.CaptureError

    class DataDependent(nn.Module):
        def forward(self, x):
            return x[x > 0].sum() if x.sum() > 0 else x

    with pytest.raises(tt.GraphCaptureError):
        tt.compile(DataDependent(), (torch.randn(4),))


def test_a_polite_config_takes_half_the_cores_and_half_the_available_ram():
    budgets = resolve_budgets(tt.CompileConfig())
    polite = tt.CompileConfig.polite()
    assert polite.cpu_budget == max(1, budgets.cpus.amount // 2)
    # The available RAM moves between the two readings: within 5% of half of it.
    assert abs(polite.ram_budget_bytes - budgets.ram.amount // 2) <= budgets.ram.amount // 20
    assert tt.CompileConfig.polite(max_region_nodes=3, cpu_budget=2).cpu_budget == 2
    encoder, _, x = two_linears()
    threads = torch.get_num_threads()
    try:
        compiled = tt.compile(encoder.eval(), (x,), tt.CompileConfig.polite(), devices="cpu")
        torch.testing.assert_close(compiled(x), eager_outputs(encoder, (x,)))
        assert torch.get_num_threads() <= polite.cpu_budget  # torch's threads held to the budget
    finally:
        torch.set_num_threads(threads)  # process-wide: the tests after this one keep every core

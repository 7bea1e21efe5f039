"""Region kernels compiled by inductor (CompileConfig.region_backend).

"eager" runs each region's fx graph op by op. "inductor" compiles each region with
torch.compile's inductor backend (torch._inductor.compile: the same compiler, fed the
region's aten graph directly, so no Python frame is traced or guarded on every call) and
keeps eager only where inductor fails. "auto" compiles every region, times both side by
side and keeps whichever ran faster, so no region gets slower than its eager graph.

A region is compiled for the shapes, dtypes and strides its inputs had when captured
(export's metadata), on fake inputs made from that metadata: no weights need to be in
RAM, so the same path serves in-memory models, weights streamed from disk and loaded
artifacts. "auto" times each region on the values it really reads (the model's weights
and the activations of the example inputs) where the caller has them, since a kernel's
speed can depend on them (batch norm over random running variances computes NaNs).
Inductor keeps its own on-disk cache (its FX graph cache), so compiling the same model a
second time skips the code generation. The generated code is native and never goes into
an artifact: loading one compiles its inductor regions again. This module makes the CPU's
kernels; runtime/device_kernels.py compiles the same graphs for the accelerators the plan
places regions on.

Under every backend, the matrix products of an inference region go to oneDNN wherever it
multiplied them faster than aten's BLAS (runtime/onednn_linear.py), and in an in-memory
CPU plan its convolutions and products compute from weights packed once, where that ran
faster (runtime/packed_weights.py): the eager graph and the graph inductor compiles are
both the rewritten one, so inductor fuses the operations between kernels on packed
weights (ResNet-50's convolutions, GPT-2's products) instead of replacing them with its
own calls of aten's kernels.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from ..errors import UnsupportedError
from ..hardware.side_by_side import time_side_by_side
from ..partition import Region, build_region_module
from ..units import format_bytes
from .onednn_linear import on_onednn, onednn_count
from .packed_weights import PackedKernel, packed_region_graph, running, traceable

log = logging.getLogger(__name__)

EAGER, INDUCTOR, AUTO = "eager", "inductor", "auto"
# A region's weights are inputs of its code, not constants, so inductor's channels-last
# layout optimization would copy every convolution weight into the new layout on every
# call: 3.4x slower on ResNet-50's last stage at batch 1 (31 ms against eager's 11 ms).
INDUCTOR_OPTIONS = {"layout_optimization": False}

RegionInputs = Callable[[], Iterator[list[Any]]]  # each region's input values, in region order


@dataclass(frozen=True)
class RegionChoice:
    """What one region runs and the figures behind it."""

    backend: str  # EAGER or INDUCTOR: what the region runs
    compile_s: float | None = None  # inductor's compile time (None: not compiled)
    eager_s: float | None = None  # median per call, measured side by side ("auto")
    inductor_s: float | None = None
    note: str = ""  # why a region asked to be compiled runs eagerly
    onednn_linears: int = 0  # its matrix products that run on oneDNN (measured on this machine: never saved)
    packed_kernels: int = (
        0  # its convolutions and products on weights packed once (runtime/packed_weights.py: never saved)
    )
    packed_bytes: int = 0  # what their packed copies take in RAM for the program's life
    fused_kernels: int = 0  # of those, the ones with a batch norm folded in or an activation as post-op

    @property
    def kernel_tag(self) -> str:
        """What its kernel's measured time is cached under, beside the graph's own key."""
        return (
            ("/inductor" if self.backend == INDUCTOR else "")
            + ("/onednn" if self.onednn_linears else "")
            + ("/packed" if self.packed_kernels else "")
        )

    @property
    def held_bytes(self) -> int:
        """What its kernel holds in RAM for the program's life: the packed weights, which
        the eager graph and inductor's code compiled from it both compute from."""
        return self.packed_bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "compile_s": self.compile_s,
            "eager_s": self.eager_s,
            "inductor_s": self.inductor_s,
            "note": self.note,
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> RegionChoice:
        if data.get("backend") not in (EAGER, INDUCTOR):
            raise ValueError(f"region backend: expected 'eager' or 'inductor', got {data.get('backend')!r}")
        return RegionChoice(
            backend=data["backend"],
            compile_s=data.get("compile_s"),
            eager_s=data.get("eager_s"),
            inductor_s=data.get("inductor_s"),
            note=data.get("note", ""),
        )


@dataclass(frozen=True)
class RegionBackends:
    """Per region, its choice and, where it runs compiled code, that code's forward."""

    mode: str  # the config's region_backend
    choices: tuple[RegionChoice, ...]
    # Region index -> the forward that replaces its captured graph run op by op: inductor's
    # code, or the graph with its products on oneDNN.
    forwards: dict[int, Callable[..., Any]]

    @property
    def compiled_count(self) -> int:
        return sum(choice.backend == INDUCTOR for choice in self.choices)

    def describe(self) -> list[str]:
        """explain()'s section: per region its backend, compile time, products on oneDNN
        and, where both were timed, both times."""
        onednn = sum(c.onednn_linears for c in self.choices)
        packed = sum(c.packed_kernels for c in self.choices if c.held_bytes)
        fused = sum(c.fused_kernels for c in self.choices if c.held_bytes)
        if self.mode == EAGER and not onednn and not packed:
            return []
        total = sum(c.compile_s or 0.0 for c in self.choices)
        held = sum(c.held_bytes for c in self.choices)
        lines = [
            f"Region backends ({self.mode}): {self.compiled_count} of {len(self.choices)} region(s) run inductor's "
            f"code, compiled in {total:.2f} s; {onednn} matrix product(s) on oneDNN, where it timed faster than aten; "
            f"{packed} convolution(s) and product(s) on weights packed once ({format_bytes(held)} held; {fused} of "
            "them with a batch norm folded in or an activation as post-op), where that timed faster",
            f"  {'region':<8} {'runs':<9} {'compile s':>9} {'eager ms':>9} {'inductor ms':>11} {'oneDNN':>6} "
            f"{'packed':>6} {'fused':>5}",
        ]
        for index, choice in enumerate(self.choices):
            packed, fused = (choice.packed_kernels, choice.fused_kernels) if choice.held_bytes else (0, 0)
            lines.append(
                f"  r{index:<7} {choice.backend:<9} {_seconds(choice.compile_s, 1):>9} "
                f"{_seconds(choice.eager_s, 1e3):>9} {_seconds(choice.inductor_s, 1e3):>11} {choice.onednn_linears:>6} "
                f"{packed:>6} {fused:>5}" + (f"  {choice.note}" if choice.note else "")
            )
        return lines


def _seconds(value: float | None, scale: float) -> str:
    return "-" if value is None else f"{value * scale:.3f}"


def eager_backends(count: int) -> RegionBackends:
    return RegionBackends(EAGER, tuple(RegionChoice(EAGER) for _ in range(count)), {})


def compile_regions(
    program,
    regions: Sequence[Region],
    mode: str,
    saved: Sequence[RegionChoice] | None = None,
    on_region: Callable[[int, int], None] | None = None,
    region_inputs: RegionInputs | None = None,
    pack_room_bytes: int = 0,
) -> RegionBackends:
    """Each inference region's kernel under `mode`, its products on oneDNN where faster
    and, in its eager graph, its convolutions on weights packed once where faster, their
    copies within `pack_room_bytes` in all (0 for a plan whose weights are not the same
    tensors on every call); with `saved` (a loaded artifact's choices), the regions
    saved as inductor's are compiled again and no region is timed. `on_region(i, n)` is
    told before region i of n compiles (the progress display). "auto" times the regions
    on `region_inputs()` (real values), else on random values of their shapes."""
    choices, forwards, modules = [], {}, []
    bound = {b.slot: b.tensor for b in program.bound}
    # The strides of the values the regions built so far give, where they differ from
    # export's: a kernel on a packed weight writes a convolution's output channels-last,
    # and a region compiled for another layout would copy it back on every call.
    arriving: dict[fx.Node, tuple[int, ...]] = {}
    compiling = mode != EAGER if saved is None else any(choice.backend == INDUCTOR for choice in saved)
    packing_decided: dict[str, int] = {}  # region structure -> the graph that won (packed_region_graph)
    for region in regions:
        captured = build_region_module(program.graph_module, region, program.in_place)
        module, onednn = on_onednn(captured)
        slots = [program.slot_of.get(node) for node in region.in_nodes]
        weights = {i: bound[slot] for i, slot in enumerate(slots) if slot in bound}
        # The eager graph: products and convolutions on packed weights where faster, then
        # the other products on oneDNN where faster.
        eager, packed = packed_region_graph(
            captured,
            weights,
            pack_room_bytes,
            functools.partial(example_inputs, region.in_nodes, skip=weights),
            packing_decided,
        )
        eager, eager_onednn = on_onednn(eager) if packed.count else (module, onednn)
        pack_room_bytes -= packed.nbytes
        modules.append(eager)
        wanted = saved[region.index].backend if saved is not None else (EAGER if mode == EAGER else INDUCTOR)
        choice, forward = saved[region.index] if saved is not None else RegionChoice(EAGER), None
        # What inductor compiles: the eager graph, its kernels on packed weights as the op.
        graph, kernels = traceable(eager) if packed.count and compiling else (eager, ())
        if wanted == INDUCTOR:
            if on_region is not None:
                on_region(region.index, len(regions))
            choice, forward = compile_graph(
                graph, region.in_nodes, torch.device("cpu"), region.index, module.forward, kernels, arriving
            )
            if saved is not None and forward is not None:  # the figures measured when it was compiled
                before = saved[region.index]
                choice = RegionChoice(INDUCTOR, choice.compile_s, before.eager_s, before.inductor_s)
        choices.append(
            replace(
                choice,
                onednn_linears=eager_onednn,  # inductor compiles the same rewritten graph
                packed_kernels=packed.count,
                packed_bytes=packed.nbytes,
                fused_kernels=packed.fused,
            )
        )
        if forward is not None or onednn or packed.count:
            forwards[region.index] = forward or eager.forward
        if compiling and (packed.count or arriving):  # as either kernel writes them
            arriving.update(output_strides(graph, region, arriving))
    backends = RegionBackends(mode, tuple(choices), forwards)
    if mode == AUTO and saved is None:
        if region_inputs is None:
            region_inputs = lambda: (example_inputs(region.in_nodes, strides=arriving) for region in regions)  # noqa: E731
        return _keep_faster(backends, modules, region_inputs())
    return backends


def compile_graph(
    module: fx.GraphModule,
    in_nodes: Sequence[fx.Node],
    device: torch.device,
    index: int,
    eager: Callable[..., Any] | None = None,
    kernels: Sequence[PackedKernel] = (),
    strides: Mapping[fx.Node, tuple[int, ...]] = MappingProxyType({}),
) -> tuple[RegionChoice, Callable | None]:
    """Inductor's code for region `index`'s graph on `device` (None where it stays eager,
    the choice saying why), compiled on fake inputs of the shapes export recorded (and of
    `strides` where given): no weight or activation is allocated to compile it. `eager`
    runs inputs of other sizes (default: `module` itself); `kernels`: those on packed
    weights that the graph calls (runtime/packed_weights.py: traceable)."""
    if not any(node.op == "call_function" for node in module.graph.nodes):
        return RegionChoice(EAGER, note="nothing to compile (no operations)"), None
    inputs = fake_inputs(in_nodes, device, strides)
    start = time.perf_counter()
    try:
        with torch.no_grad():
            compiled = torch._inductor.compile(module, inputs, options=INDUCTOR_OPTIONS)
    except Exception as error:  # inductor's failures are many and internal; the region stays eager
        log.warning("region %d stays eager on %s: inductor could not compile it (%s)", index, device, error)
        return RegionChoice(EAGER, note=f"inductor failed: {type(error).__name__}: {str(error)[:120]}"), None
    compile_s = time.perf_counter() - start
    return RegionChoice(INDUCTOR, compile_s), StrideMatched(compiled, eager or module.forward, inputs, kernels)


def faster_of(
    choice: RegionChoice, eager: Callable, compiled: Callable, args: Sequence[Any], sync: Callable | None = None
) -> RegionChoice:
    """ "auto" for one compiled region: its eager graph and inductor's code timed side by
    side on `args` (`sync` waits for a device's queued work), the faster one chosen."""
    eager_s, inductor_s = time_side_by_side(lambda: eager(*args), lambda: compiled(*args), sync)
    faster = INDUCTOR if inductor_s < eager_s else EAGER
    return replace(choice, backend=faster, eager_s=eager_s, inductor_s=inductor_s)


def _keep_faster(
    backends: RegionBackends, modules: Sequence[fx.GraphModule], inputs_per_region: Iterator[list[Any]]
) -> RegionBackends:
    """ "auto": per compiled region, its eager graph and inductor's code timed side by side
    on the region's inputs; the faster one kept."""
    choices, forwards = list(backends.choices), dict(backends.forwards)
    with torch.no_grad():
        for index, inputs in enumerate(inputs_per_region):
            if choices[index].backend != INDUCTOR:
                continue
            eager = modules[index].forward
            choices[index] = faster_of(choices[index], eager, forwards[index], inputs)
            if choices[index].backend == EAGER:
                choices[index] = replace(choices[index], onednn_linears=onednn_count(modules[index]))
                del forwards[index]
                if choices[index].onednn_linears or choices[index].packed_kernels:
                    forwards[index] = eager
    return RegionBackends(backends.mode, tuple(choices), forwards)


def example_inputs(
    in_nodes: Sequence[fx.Node],
    device: torch.device | None = None,
    skip: Container[int] = (),
    strides: Mapping[fx.Node, tuple[int, ...]] = MappingProxyType({}),
) -> list[Any]:
    """Inputs of the shapes, dtypes and strides export recorded (or `strides`, where
    given), on `device` (the CPU by default): random floats (their values do not change a
    kernel's speed), zeros elsewhere (valid indices, masks); None at the positions in `skip`."""
    values = []
    for position, node in enumerate(in_nodes):
        if position in skip:
            values.append(None)
            continue
        meta = _static_meta(node)
        if meta is None:
            values.append(node.meta.get("val"))
            continue
        stride = strides.get(node, tuple(meta.stride()))
        value = torch.empty_strided(tuple(meta.shape), stride, dtype=meta.dtype, device=device)
        if value.is_floating_point():
            value.normal_()
        else:
            value.zero_()
        values.append(value)
    return values


def fake_inputs(
    in_nodes: Sequence[fx.Node],
    device: torch.device,
    strides: Mapping[fx.Node, tuple[int, ...]] = MappingProxyType({}),
    mode: FakeTensorMode | None = None,
) -> list[Any]:
    """Fake tensors on `device` of the shapes, dtypes and strides export recorded (or
    `strides`, where given), static, made under a mode with a shape environment: inductor
    keys its on-disk graph cache on that environment, and bypasses the cache for real
    tensors (which carry none)."""
    values = []
    with mode or FakeTensorMode(shape_env=ShapeEnv()):
        for node in in_nodes:
            meta = _static_meta(node)
            if meta is None:
                values.append(node.meta.get("val"))
                continue
            stride = strides.get(node, tuple(meta.stride()))
            values.append(torch.empty_strided(tuple(meta.shape), stride, dtype=meta.dtype, device=device))
    return values


def output_strides(
    module: fx.GraphModule, region: Region, strides: Mapping[fx.Node, tuple[int, ...]]
) -> dict[fx.Node, tuple[int, ...]]:
    """The strides of the CPU values region `region`'s graph `module` gives from inputs of
    `strides` (export's elsewhere), where they differ from export's, computed on fake
    values: what its eager graph gives, and what inductor's code gives (it keeps the
    strides of the graph it traced). None where the graph cannot run on fake values."""
    mode = FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
    try:
        with mode, torch.no_grad():
            outputs = module(*fake_inputs(region.in_nodes, torch.device("cpu"), strides, mode))
    except Exception as error:  # export's strides stand: a call copies what arrives otherwise
        log.debug("region %d: no fake run to follow its strides (%s)", region.index, error)
        return {}
    found = {}
    for node, value in zip(region.out_nodes, outputs, strict=True):
        meta = node.meta.get("val")
        if isinstance(value, torch.Tensor) and isinstance(meta, torch.Tensor) and value.stride() != meta.stride():
            found[node] = tuple(value.stride())
    return found


def _static_meta(node: fx.Node) -> torch.Tensor | None:
    """Export's metadata of a tensor input (None for another value); UnsupportedError
    where its shape is dynamic."""
    meta = node.meta.get("val")
    if not isinstance(meta, torch.Tensor):
        return None
    if any(not isinstance(d, int) for d in meta.shape):
        raise UnsupportedError(f"region_backend: input {node.name!r} has a dynamic shape {tuple(meta.shape)}")
    return meta


class StrideMatched:
    """Inductor's code for a region, called with inputs laid out as it was compiled for.

    Inductor's generated code checks each input's size and stride. A value copied between
    tiers arrives contiguous where eager gave it other strides: such an input is copied
    into the compiled layout first. A layer split between the CPU and a device calls the
    region on a slice of its weights: other sizes, which the eager graph runs. (The
    checks cost a few hundred nanoseconds per input.)"""

    def __init__(
        self,
        compiled: Callable[..., Any],
        eager: Callable[..., Any],
        inputs: Sequence[Any],
        kernels: Sequence[PackedKernel] = (),
    ) -> None:
        """`kernels`: those on packed weights that the code calls (runtime/packed_weights.py)."""
        self._compiled, self._eager, self._kernels = compiled, eager, tuple(kernels)
        tensors = [(index, value) for index, value in enumerate(inputs) if isinstance(value, torch.Tensor)]
        self._layouts = [(index, value.shape, value.stride()) for index, value in tensors]

    def __call__(self, *args: Any) -> Any:
        fixed = None
        for index, shape, stride in self._layouts:
            value = args[index]
            if value.shape != shape:
                return self._eager(*args)
            if value.stride() != stride and not _same_layout(shape, value.stride(), stride):
                fixed = fixed or list(args)
                fixed[index] = torch.empty_strided(shape, stride, dtype=value.dtype, device=value.device).copy_(value)
        if not self._kernels:
            return self._compiled(*(fixed or args))
        with running(self._kernels):
            return self._compiled(*(fixed or args))


def _same_layout(shape: Sequence[int], got: Sequence[int], expected: Sequence[int]) -> bool:
    """Whether two strides address a tensor of `shape` alike: they may differ only along
    dimensions of size 1 (oneDNN's 1x1 outputs; inductor's own checks skip them too)."""
    return all(size == 1 or a == b for size, a, b in zip(shape, got, expected, strict=True))


def unless_model_forward_is_faster(
    backends: RegionBackends, run_region: Callable[[], Any], run_model: Callable[[], Any]
) -> RegionBackends:
    """For a one-region plan whose direct path would call the model's own forward (which
    keeps eager's fused kernels, such as nn.TransformerEncoderLayer's fast path, that the
    captured graph spells out) but whose region got another kernel (inductor's code, or
    products on oneDNN): that kernel only where it runs faster than the model's forward,
    timed side by side on the example inputs."""
    model_s, region_s = time_side_by_side(run_model, run_region)
    if region_s < model_s:
        return backends
    (choice,) = backends.choices
    note = f"the model's own forward ran faster ({model_s * 1e3:.3f} ms against {region_s * 1e3:.3f} ms)"
    plain = replace(choice, backend=EAGER, note=note, onednn_linears=0, packed_kernels=0, packed_bytes=0)
    return RegionBackends(backends.mode, (plain,), {})

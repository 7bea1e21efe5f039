"""A CPU region's convolutions and matrix products on weights packed once, where faster.

Eager's kernels read a weight as the model stores it, and oneDNN's reorder it into their
blocked layout on every call. In a region of an in-memory plan, whose weights are the
model's own tensors on every call, each aten.conv2d and each linear, addmm or mm of
static shape whose weight is one of those tensors becomes a call of a PackedKernel where
the packed weight computed it faster on this host (hardware/conv_kernels.py,
hardware/matmul_kernels.py) and the region as a whole ran faster so than as captured
(packed_region_graph); the eval-mode batch norm that alone reads a convolution
is folded into its copy, and the activation computed of a product's or a normalized
convolution's output alone becomes the kernel's post-op (runtime/activation_chains.py).
The module packs the copy when the region is built, keeps it from one call to the next
and packs again where a tensor it is made of is another tensor, or was changed in place
(its version counter moved), so it never computes with a stale copy. The copies cost
memory for the program's life: the caller gives the room they may take, and the
lowering plans their bytes as a resident buffer in RAM (planning/lowering.py), so
budgets and simulated peaks count them. Only inference regions are rewritten: oneDNN's
ops have no gradient. Inductor compiles the rewritten graph too (`traceable`): each
kernel becomes a call of the `tensortorrent::packed` op, which inductor leaves to us as
it leaves aten's products to their libraries, fusing the operations between them.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import operator
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import fx, nn

from ..hardware import conv_kernels, matmul_kernels
from ..hardware.conv_kernels import Convolution, NormalizedConvolution
from ..hardware.matmul_kernels import ActivatedProduct, Product
from ..hardware.side_by_side import time_side_by_side
from ..partition.region_module import structural_key
from .activation_chains import activation_after
from .onednn_linear import on_onednn, operands, product, static_cpu_tensor

log = logging.getLogger(__name__)
aten = torch.ops.aten
Kernel = Convolution | NormalizedConvolution | Product | ActivatedProduct
VIEWS = (aten.view.default, aten.reshape.default, aten._unsafe_view.default)
# How much faster than its captured graph a region must run on packed weights to keep
# them: beyond the timing's noise between two equal graphs (a few percent on two cores).
PACKED_MARGIN = 1.03
PACKED_OP_NAME = "tensortorrent::packed"


class PackedKernel(nn.Module):
    """One convolution or product computed from a packed copy of its weight (with a batch
    norm folded in, for a NormalizedConvolution), kept across calls."""

    def __init__(self, kernel: Kernel, sources: Sequence) -> None:
        super().__init__()
        self.kernel = kernel
        self._state = self._packed(tuple(sources))  # (sources, their versions, the packed copy)
        self._packing = threading.Lock()  # concurrent calls pack once

    @property
    def nbytes(self) -> int:
        packed = self._state[2]
        return sum(_nbytes(t) for t in (packed if isinstance(packed, tuple) else (packed,)))

    def _packed(self, sources: tuple) -> tuple:
        with torch.no_grad():
            packed = self.kernel.pack(*(t.detach() if t is not None else None for t in sources))
        return sources, _versions(sources), packed

    def forward(self, x: torch.Tensor, per_call: torch.Tensor | None, *sources: torch.Tensor | None) -> torch.Tensor:
        """`per_call`: what the kernel adds that is not folded into the copy (a bias, or a
        normalized convolution's residual); `sources`: the model's tensors the copy is
        made of (the weight first)."""
        state = self._state
        if _stale(state, sources):
            with self._packing:
                state = self._state
                if _stale(state, sources):
                    state = self._state = self._packed(sources)
        return self.kernel.on_packed(x, state[2], per_call)


def _versions(sources: tuple) -> tuple:
    return tuple(t._version if t is not None else None for t in sources)


def _stale(state: tuple, sources: tuple) -> bool:
    """Whether the copy in `state` was made of other tensors than `sources`, or of these
    before one was changed in place (its version counter moved)."""
    kept, versions, _ = state
    return any(a is not b for a, b in zip(kept, sources, strict=True)) or versions != _versions(sources)


def _nbytes(tensor: torch.Tensor) -> int:
    if tensor.is_mkldnn:
        return int(torch.ops.mkldnn._nbytes(tensor))
    return tensor.numel() * tensor.element_size()


# Inductor's code calls the kernels on packed weights of the region running it on this
# thread by position (`running`), and names each by what it computes: its on-disk cache
# then serves the same code to the same region compiled again, in any process, and never
# to a region whose kernels compute something else.
_running = threading.local()
_OUTPUTS: dict[str, tuple[tuple[int, ...], torch.dtype, torch.memory_format]] = {}  # by kernel name

torch.library.define(
    PACKED_OP_NAME, "(str kernel, int position, Tensor x, Tensor? per_call, Tensor?[] sources) -> Tensor"
)


@torch.library.impl(PACKED_OP_NAME, "cpu")
def _packed_op(
    kernel: str, position: int, x: torch.Tensor, per_call: torch.Tensor | None, sources: list
) -> torch.Tensor:
    # In the layout its fake promises (a no-op where oneDNN wrote it so): inductor's code
    # indexes the result by those strides.
    _, _, layout = _OUTPUTS[kernel]
    kernels = getattr(_running, "kernels", None)
    if kernels is None:
        raise RuntimeError(f"{PACKED_OP_NAME} runs only within a region's call (packed_weights.running)")
    return kernels[position](x, per_call, *sources).contiguous(memory_format=layout)


@torch.library.register_fake(PACKED_OP_NAME)
def _packed_shape(
    kernel: str, position: int, x: torch.Tensor, per_call: torch.Tensor | None, sources: list
) -> torch.Tensor:
    shape, dtype, layout = _OUTPUTS[kernel]
    return x.new_empty(shape, dtype=dtype).contiguous(memory_format=layout)


PACKED = torch.ops.tensortorrent.packed.default


@contextlib.contextmanager
def running(kernels: Sequence[PackedKernel]) -> Iterator[None]:
    """The kernels inductor's code for a region calls while it runs on this thread."""
    before = getattr(_running, "kernels", None)
    _running.kernels = kernels
    try:
        yield
    finally:
        _running.kernels = before


def traceable(module: fx.GraphModule) -> tuple[fx.GraphModule, tuple[PackedKernel, ...]]:
    """A copy of a rewritten region `module` whose kernels on packed weights are calls of
    the `tensortorrent::packed` op (which inductor compiles around) instead of calls of
    submodules, and those kernels in the positions the calls name (see `running`)."""
    graph = fx.Graph()
    copies: dict[fx.Node, fx.Node] = {}
    graph.output(graph.graph_copy(module.graph, copies))
    kernels: list[PackedKernel] = []
    for node in module.graph.nodes:
        if node.op != "call_module" or not isinstance(module.get_submodule(node.target), PackedKernel):
            continue
        kernel = module.get_submodule(node.target)
        value = node.meta["val"]
        # oneDNN writes a convolution's output channels-last, whatever its input's layout.
        convolution = isinstance(kernel.kernel, (Convolution, NormalizedConvolution)) and value.dim() == 4
        output = (tuple(value.shape), value.dtype, torch.channels_last if convolution else torch.contiguous_format)
        name = f"{kernel.kernel!r} -> {output}"
        _OUTPUTS[name] = output
        copy = copies[node]
        x, per_call, *sources = copy.args
        with graph.inserting_before(copy):
            call = graph.call_function(PACKED, (name, len(kernels), x, per_call, list(sources)))
        call.meta = dict(copy.meta)
        copy.replace_all_uses_with(call)
        graph.erase_node(copy)
        kernels.append(kernel)
    return fx.GraphModule(module, graph, class_name=type(module).__name__), tuple(kernels)


@dataclass(frozen=True)
class Packed:
    """What with_packed_weights rewrote in one region."""

    count: int  # kernels on packed weights
    nbytes: int  # their packed copies
    fused: int = 0  # of those, the ones with a batch norm folded in or an activation as post-op


def pack_room_bytes(ram_budget_bytes: int, weight_bytes: int) -> int:
    """The RAM packed copies may take in an in-memory CPU plan: what half the RAM budget
    leaves beside the weights (the rest is for activations and the copies' own churn)."""
    return max(0, ram_budget_bytes // 2 - weight_bytes)


@dataclass(frozen=True)
class _Match:
    """A kernel found in a region's graph: what computes it from a packed copy, and its nodes."""

    kernel: Kernel
    x: fx.Node
    per_call: fx.Node | None  # added per call: a bias not folded into the copy, or a residual
    sources: tuple[fx.Node | None, ...]  # the model's tensors the copy is made of, the weight first
    chain: tuple[fx.Node, ...]  # the nodes it replaces, the last one's value what it computes


def packed_region_graph(
    captured: fx.GraphModule,
    weights: Mapping[int, torch.Tensor],
    room_bytes: int,
    activations: Callable[[], list],
    decided: dict[str, int] | None = None,
) -> tuple[fx.GraphModule, Packed]:
    """The fastest of the region's graph as captured, with its kernels on packed weights
    where each timed faster alone, and with every kernel oneDNN can take packed: timed
    side by side on the model's weights and `activations()` (the region's other inputs,
    None at the weights' positions). A kernel timed alone misjudges one in a model, both
    ways: packing every convolution of ResNet-50 took it to 0.64x eager's time, the
    kernels that timed faster alone to 0.70x; a small Llama's down projections, 6% faster
    packed alone, made its decoder layers slower. A packed graph must beat the captured
    one by PACKED_MARGIN, since its copies cost RAM. Each weight is packed once: the
    graphs share the copies. `decided` remembers, across the regions of one compile, which
    graph won for each region's structure (partition/region_module.py: structural_key)."""
    every = _packed_kernels(captured, weights, room_bytes, each_timed=False)
    if not every:
        return captured, Packed(0, 0)
    each = [kernel for kernel in every if kernel.faster_alone]
    choices = ([each] if each else []) + ([every] if len(every) != len(each) else [])
    packed_graphs = [_rewritten(captured, chosen) for chosen in choices]
    # A region like one timed before in this compile (another layer of the same shapes,
    # with the same kernels packable) takes the graph that won there.
    key = f"{structural_key(captured)}/{len(each)}/{len(every)}" if decided is not None else None
    if key is not None and key in decided:
        return ((captured, Packed(0, 0)), *packed_graphs)[decided[key]]
    with torch.random.fork_rng():  # the caller's seed stays as it was
        inputs = [weights.get(i, value) for i, value in enumerate(activations())]
    best, best_run = (captured, Packed(0, 0)), on_onednn(captured)[0]
    for candidate in packed_graphs:
        run = on_onednn(candidate[0])[0]
        best_s, candidate_s = time_side_by_side(functools.partial(best_run, *inputs), functools.partial(run, *inputs))
        margin = PACKED_MARGIN if best[1].count == 0 else 1.0
        log.debug("%d kernel(s) packed: %.3f ms against %.3f ms", candidate[1].count, candidate_s * 1e3, best_s * 1e3)
        if candidate_s * margin < best_s:
            best, best_run = candidate, run
    if key is not None:
        decided[key] = 0 if best[1].count == 0 else 1 + packed_graphs.index(best)
    return best


def with_packed_weights(
    module: fx.GraphModule, weights: Mapping[int, torch.Tensor], room_bytes: int
) -> tuple[fx.GraphModule, Packed]:
    """A copy of the region's aten `module` with each convolution and product that ran
    faster on a packed weight rewritten to one (with the batch norm, residual sum and
    activation that follow a convolution, and the activation that follows a product,
    folded into it), in graph order while their copies fit `room_bytes`; `weights`: the
    module's inputs that are the model's own tensors, by position. `module` itself where
    nothing is rewritten."""
    return _rewritten(module, _packed_kernels(module, weights, room_bytes, each_timed=True))


@dataclass(frozen=True)
class _Chosen:
    match: _Match
    packed: PackedKernel
    faster_alone: bool  # computed faster on the packed copy, timed alone


def _packed_kernels(
    module: fx.GraphModule, weights: Mapping[int, torch.Tensor], room_bytes: int, each_timed: bool
) -> list[_Chosen]:
    """The kernels of `module` on packed copies of `weights` in graph order while the copies
    fit `room_bytes`: those that timed faster alone, or with `each_timed=False` every one
    oneDNN computes packed."""
    if room_bytes <= 0:
        return []
    placeholders = [node for node in module.graph.nodes if node.op == "placeholder"]
    weight_of = {node: weights[position] for position, node in enumerate(placeholders) if position in weights}
    chosen, nbytes, claimed = [], 0, set()  # claimed: the nodes chosen kernels replace
    for node in module.graph.nodes:
        match = _packable(node, weight_of, claimed)
        if match is None or not claimed.isdisjoint(match.chain):
            continue
        stored = weight_of[match.sources[0]]
        if nbytes + stored.numel() * stored.element_size() > room_bytes:
            continue  # a packed copy is never smaller than the weight: no need to pack it to know
        kernels = matmul_kernels if isinstance(match.kernel, (Product, ActivatedProduct)) else conv_kernels
        timing = kernels.packed_timing(match.kernel)
        if timing.packed_s is None or (each_timed and not timing.faster_packed):
            continue
        packed = PackedKernel(match.kernel, [weight_of[s] if s is not None else None for s in match.sources])
        if nbytes + packed.nbytes <= room_bytes:
            chosen.append(_Chosen(match, packed, timing.faster_packed))
            nbytes += packed.nbytes
            claimed.update(match.chain)
    return chosen


def _rewritten(module: fx.GraphModule, chosen: Sequence[_Chosen]) -> tuple[fx.GraphModule, Packed]:
    """A copy of `module` with each chosen kernel's nodes replaced by a call of its
    PackedKernel; `module` itself where none is chosen."""
    if not chosen:
        return module, Packed(0, 0)
    graph = fx.Graph()
    copies: dict[fx.Node, fx.Node] = {}
    graph.output(graph.graph_copy(module.graph, copies))
    rewritten = fx.GraphModule(module, graph, class_name=type(module).__name__)
    copied = lambda node: copies[node] if node is not None else None  # noqa: E731
    for index, (match, packed) in enumerate((c.match, c.packed) for c in chosen):
        name = f"packed_{index}"
        rewritten.add_submodule(name, packed)
        last = copies[match.chain[-1]]
        with graph.inserting_before(last):
            call = graph.call_module(name, (copies[match.x], copied(match.per_call), *map(copied, match.sources)))
        call.meta = dict(last.meta)
        last.replace_all_uses_with(call)
        for node in reversed(match.chain):  # each one's only user goes first
            graph.erase_node(copies[node])
            copies[node] = call  # what later kernels read of it
    rewritten.recompile()
    nbytes = sum(c.packed.nbytes for c in chosen)
    fused = sum(isinstance(c.packed.kernel, (NormalizedConvolution, ActivatedProduct)) for c in chosen)
    return rewritten, Packed(len(chosen), nbytes, fused)


def _packable(node: fx.Node, weight_of: Mapping[fx.Node, torch.Tensor], claimed: set[fx.Node]) -> _Match | None:
    """The kernel at `node` where it is a convolution or a product whose weight is one of
    the model's tensors; None otherwise. `claimed`: nodes that kernels chosen before
    replace (a residual sum one took is not another's)."""
    convolution = _convolution(node)
    if convolution is not None:
        x, weight, bias = _conv_args(node.args)[:3]
        if weight not in weight_of:
            return None
        normalized = _normalized(node, convolution, bias, weight_of, claimed)
        return normalized or _Match(convolution, x, bias, (weight,), (node,))
    p = product(node)
    if p is None:
        return None
    x, weight, bias, _ = operands(node)
    if weight not in weight_of:
        return None
    return _activated(node, p, x, bias, weight) or _Match(p, x, bias, (weight,), (node,))


def _activated(node: fx.Node, p: Product, x: fx.Node, bias: fx.Node | None, weight: fx.Node) -> _Match | None:
    """The product at `node` with the activation computed of it alone (seen through a view,
    as GPT-2's Conv1D reshapes its output first), if one is."""
    view = _only_user(node)
    shape = _static_view(view) if view is not None else None
    found = activation_after(view if shape is not None else node)
    if found is None:
        return None
    activation, chain = found
    nodes = (node, view, *chain) if shape is not None else (node, *chain)
    return _Match(ActivatedProduct(p, activation, shape), x, bias, (weight,), nodes)


def _static_view(node: fx.Node) -> tuple[int, ...] | None:
    """The shape a view or reshape of static ints at `node` gives; None for any other node."""
    if node.op != "call_function" or node.target not in VIEWS or node.kwargs or len(node.args) != 2:
        return None
    shape = node.args[1]
    return tuple(shape) if isinstance(shape, (list, tuple)) and all(type(d) is int for d in shape) else None


def _normalized(
    node: fx.Node,
    convolution: Convolution,
    bias: fx.Node | None,
    weight_of: Mapping[fx.Node, torch.Tensor],
    claimed: set[fx.Node],
) -> _Match | None:
    """The convolution at `node` with the eval-mode batch norm that alone reads it, the
    residual sum that alone reads the norm (unless claimed) and the activation computed of
    what comes last alone, where there are: the norm's tensors and the convolution's bias
    must be the model's own; None where no norm follows."""
    norm = _only_user(node)
    found = _batch_norm(norm, node) if norm is not None else None
    if found is None:
        return None
    normalized, (scale, shift, mean, var, eps) = found
    if any(t is not None and t not in weight_of for t in (bias, scale, shift, mean, var)):
        return None
    chain = [node, norm, normalized] if normalized is not norm else [node, norm]
    residual = _residual_sum(normalized, claimed)
    if residual is not None:
        chain.append(residual[0])
    found = activation_after(chain[-1])
    activation, after = found if found is not None else (None, ())
    x, weight = _conv_args(node.args)[:2]
    return _Match(
        NormalizedConvolution(convolution, float(eps), activation, residual is not None),
        x,
        residual[1] if residual is not None else None,
        (weight, bias, scale, shift, mean, var),
        (*chain, *after),
    )


def _residual_sum(node: fx.Node, claimed: set[fx.Node]) -> tuple[fx.Node, fx.Node] | None:
    """(the sum, its other operand) where an unclaimed aten.add alone reads `node` and adds
    it to another value of the same shape and dtype; None otherwise."""
    add = _only_user(node)
    if add is None or add in claimed or add.target != aten.add.Tensor or add.kwargs or len(add.args) != 2:
        return None
    (other,) = [a for a in add.args if a is not node] or [None]
    if not isinstance(other, fx.Node):
        return None
    mine, theirs = node.meta.get("val"), other.meta.get("val")
    if not isinstance(mine, torch.Tensor) or not isinstance(theirs, torch.Tensor):
        return None
    return (add, other) if (mine.shape, mine.dtype) == (theirs.shape, theirs.dtype) else None


def _batch_norm(norm: fx.Node, x: fx.Node) -> tuple[fx.Node, tuple] | None:
    """Where `norm` is an eval-mode batch norm of `x` whose normalized values nothing else
    of it is read beside: (their node, (scale, shift, mean, var, eps)); None otherwise.
    Export gives aten.batch_norm, its decompositions an op whose first output holds them."""
    if norm.op != "call_function" or norm.kwargs or norm.args[0] is not x:
        return None
    if norm.target == aten.batch_norm.default:
        _, scale, shift, mean, var, training, _, eps = norm.args[:8]
        return None if training else (norm, (scale, shift, mean, var, eps))
    if norm.target == aten._native_batch_norm_legit_no_training.default:
        _, scale, shift, mean, var, _, eps = norm.args
        first = _only_user(norm)
        alone = first is not None and first.target is operator.getitem and first.args[1] == 0
        return (first, (scale, shift, mean, var, eps)) if alone else None
    return None


def _only_user(node: fx.Node) -> fx.Node | None:
    return next(iter(node.users)) if len(node.users) == 1 else None


def _convolution(node: fx.Node) -> Convolution | None:
    """The convolution `node` computes where a packed weight could take it: an aten.conv2d
    of static 4-d shapes in one dtype."""
    if node.op != "call_function" or node.target != aten.conv2d.default or node.kwargs:
        return None
    x, weight, bias, stride, padding, dilation, groups = _conv_args(node.args)
    x_value, weight_value = static_cpu_tensor(x), static_cpu_tensor(weight)
    bias_value = static_cpu_tensor(bias) if bias is not None else None
    if x_value is None or weight_value is None or (bias is not None and bias_value is None):
        return None
    if x_value.dim() != 4 or weight_value.dim() != 4:
        return None
    if any(v.dtype != x_value.dtype for v in (weight_value, bias_value) if v is not None):
        return None
    return Convolution(
        tuple(x_value.shape),
        tuple(weight_value.shape),
        bias is not None,
        _pair(stride),
        _pair(padding),
        _pair(dilation),
        int(groups),
        x_value.dtype,
    )


def _conv_args(args: Sequence) -> tuple:
    """aten.conv2d's arguments with their defaults: (x, weight, bias, stride, padding, dilation, groups)."""
    defaults = (None, None, None, (1, 1), (0, 0), (1, 1), 1)
    return tuple(args) + defaults[len(args) :]


def _pair(value) -> tuple[int, int]:
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    return (int(values[0]), int(values[-1]))

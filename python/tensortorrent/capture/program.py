"""One normalized graph: every placeholder bound to a value slot, shared weights bound once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx
from torch.export.graph_signature import InputKind, OutputKind

from ..errors import UnsupportedError

aten = torch.ops.aten
# Functional writes with an in-place twin. A static KV cache's update (index_copy of a
# layer's keys) exports as a new copy of the whole buffer, written back after the call:
# twice the cache's bytes moved per call. Where nothing else reads the buffer's old
# value, the twin writes the buffer itself.
IN_PLACE = {aten.index_copy.default: aten.index_copy_.default, aten.index_put.default: aten.index_put_.default}


@dataclass(frozen=True)
class BoundTensor:
    """A parameter, buffer or constant that lives in one slot for the program's lifetime.

    Tied weights (one tensor under several names) share a BoundTensor, so they are held,
    counted and later placed once.
    """

    slot: int
    names: tuple[str, ...]
    kind: str  # "parameter", "buffer" or "constant"
    tensor: torch.Tensor

    @property
    def nbytes(self) -> int:
        return self.tensor.numel() * self.tensor.element_size()


@dataclass(frozen=True)
class OutputRef:
    """One flat user output: a slot's value, or a constant the graph returns as is."""

    node: fx.Node | None
    constant: Any = None


@dataclass
class NormalizedProgram:
    """The exported graph with its placeholders resolved to slots.

    Slots index one flat list of values per call ("the environment"): bound tensors
    first, then user inputs; the partitioner appends slots for values that cross regions.
    """

    exported: torch.export.ExportedProgram  # what an artifact saves; its graph_module is ours
    graph_module: fx.GraphModule
    in_spec: Any
    out_spec: Any
    bound: list[BoundTensor]
    slot_of: dict[fx.Node, int]
    input_slots: list[int]
    outputs: list[OutputRef]
    buffer_mutations: list[tuple[fx.Node, torch.Tensor]] = field(default_factory=list)
    # The buffer mutations a region computes in place (IN_PLACE): their value is the buffer.
    in_place: frozenset[fx.Node] = frozenset()

    @property
    def compute_nodes(self) -> list[fx.Node]:
        """The operations, in graph (topological) order."""
        return [n for n in self.graph_module.graph.nodes if n.op not in ("placeholder", "output")]

    @property
    def mutated_slots(self) -> frozenset[int]:
        """The bound slots of the buffers the program writes."""
        written = {id(buffer) for _, buffer in self.buffer_mutations}
        return frozenset(b.slot for b in self.bound if id(b.tensor) in written)

    @property
    def gathered_slots(self) -> frozenset[int]:
        """The bound slots that calls only gather from, never read whole: an embedding's
        table (the rows of the tokens), a mixture of experts' stacked experts in a grouped
        matmul (the experts a token is routed to), read through views of them at most
        (storage/mapped_weights.py)."""
        uses: dict[int, bool] = {}
        gathering = _gathering_ops()
        for node, slot in self.slot_of.items():
            if node.op == "placeholder" and slot < len(self.bound):
                uses[slot] = uses.get(slot, True) and bool(node.users) and _only_gathered(node, gathering)
        return frozenset(slot for slot, gathered in uses.items() if gathered and slot not in self.mutated_slots)

    @property
    def parameter_bytes(self) -> int:
        return sum(b.nbytes for b in self.bound)


def normalize(exported: torch.export.ExportedProgram) -> NormalizedProgram:
    """Resolves the exported program's placeholders and outputs into slots."""
    signature = exported.graph_signature
    graph = exported.graph_module.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(signature.input_specs):
        raise UnsupportedError(
            f"exported graph has {len(placeholders)} placeholders but its signature lists {len(signature.input_specs)}"
        )

    slot_of: dict[fx.Node, int] = {}
    bound: list[BoundTensor] = []
    bound_by_identity: dict[int, int] = {}  # id(tensor) -> index in `bound`
    user_input_nodes: list[fx.Node] = []
    for node, spec in zip(placeholders, signature.input_specs):
        if spec.kind == InputKind.USER_INPUT:
            user_input_nodes.append(node)
            continue
        kind, tensor = _bound_value(exported, spec)
        index = bound_by_identity.get(id(tensor))
        if index is None:
            index = len(bound)
            bound_by_identity[id(tensor)] = index
            bound.append(BoundTensor(slot=index, names=(spec.target,), kind=kind, tensor=tensor))
        else:
            shared = bound[index]
            bound[index] = BoundTensor(shared.slot, shared.names + (spec.target,), shared.kind, shared.tensor)
        slot_of[node] = index

    input_slots = []
    for node in user_input_nodes:
        slot_of[node] = len(bound) + len(input_slots)
        input_slots.append(slot_of[node])

    output_node = next(n for n in reversed(graph.nodes) if n.op == "output")
    outputs: list[OutputRef] = []
    mutations: list[tuple[fx.Node, torch.Tensor]] = []
    in_place: set[fx.Node] = set()
    buffer_node = {spec.target: node for node, spec in zip(placeholders, signature.input_specs) if spec.target}
    for value, spec in zip(output_node.args[0], signature.output_specs):
        if spec.kind == OutputKind.USER_OUTPUT:
            outputs.append(OutputRef(value) if isinstance(value, fx.Node) else OutputRef(None, value))
        elif spec.kind == OutputKind.BUFFER_MUTATION:
            # A buffer not in the state dict (registered persistent=False) is among the constants.
            mutated = exported.state_dict.get(spec.target, exported.constants.get(spec.target))
            mutations.append((value, mutated))
            if _writable_in_place(value, buffer_node[spec.target]):
                in_place.add(value)
        else:
            raise UnsupportedError(
                f"the model's forward {spec.kind.name.lower().replace('_', ' ')} ({spec.target}); "
                "only buffer mutations are supported"
            )

    return NormalizedProgram(
        exported=exported,
        graph_module=exported.graph_module,
        in_spec=exported.call_spec.in_spec,
        out_spec=exported.call_spec.out_spec,
        bound=bound,
        slot_of=slot_of,
        input_slots=input_slots,
        outputs=outputs,
        buffer_mutations=mutations,
        in_place=frozenset(in_place),
    )


def _gathering_ops() -> dict:
    """Op -> the arguments it gathers from. transformers registers its grouped matmul
    fallback (one matmul per expert that has tokens) as an op of its own; our int8
    experts' op (compression/int8_experts.py) reads the values and scales of those."""
    ops = {aten.embedding.default: (0,), aten._grouped_mm.default: (1,)}
    fallback = getattr(getattr(torch.ops, "transformers", None), "grouped_mm_fallback", None)
    if fallback is not None:
        ops[fallback.default] = (1,)
    ops[torch.ops.tensortorrent.int8_grouped_linear.default] = (1, 2)
    return ops


VIEWS = {aten.transpose.int, aten.permute.default, aten.t.default, aten.view.default}  # the same bytes, other shapes


def _only_gathered(node: fx.Node, gathering: dict) -> bool:
    """Whether every use of `node`, through views of it, gathers from it (`gathering`: op ->
    the arguments it gathers from)."""
    for user in node.users:
        if user.target in VIEWS and user.args[0] is node:
            if not user.users or not _only_gathered(user, gathering):
                return False
        elif user.target not in gathering:
            return False
        elif not any(len(user.args) > i and user.args[i] is node for i in gathering[user.target]):
            return False
    return True


def _writable_in_place(value: fx.Node, buffer: fx.Node) -> bool:
    """Whether `value`, a buffer's new value, may be written into the buffer itself: an op
    with an in-place twin, on the buffer, which nothing else reads (so that no reader
    sees the new value where it expected the old one)."""
    return (
        value.op == "call_function"
        and value.target in IN_PLACE
        and value.args[0] is buffer
        and list(buffer.users) == [value]
    )


def _bound_value(exported: torch.export.ExportedProgram, spec) -> tuple[str, torch.Tensor]:
    if spec.kind == InputKind.PARAMETER:
        return "parameter", exported.state_dict[spec.target]
    if spec.kind == InputKind.BUFFER:
        source = exported.state_dict if spec.persistent else exported.constants
        return "buffer", source[spec.target]
    if spec.kind == InputKind.CONSTANT_TENSOR:
        return "constant", exported.constants[spec.target]
    raise UnsupportedError(f"exported input '{spec.arg.name}' of kind {spec.kind.name} is not supported")


def value_bytes(node: fx.Node) -> int:
    """Bytes of the tensor(s) a graph node produces, from the metadata export recorded."""
    values = node.meta.get("val")
    values = values if isinstance(values, (tuple, list)) else [values]
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))

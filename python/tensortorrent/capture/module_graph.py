"""ModuleGraph: modules wired together by references, checked and copied on construction,
and run as one nn.Module (which tt.compile captures as a whole)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..errors import GraphDefinitionError, GraphDefinitionTypeError
from .export import eval_mode
from .graph_values import GraphInput, NodeOutput, copy_structure, node_outputs_in, resolve

# A node's module becomes a submodule of the graph under the node's name, so the name
# cannot be one nn.Module already uses, nor one of the graph's own attributes.
RESERVED_NAMES = frozenset(dir(nn.Module())) | {"nodes", "outputs"}


class ModuleNode:
    """One call in a ModuleGraph, `module(*args, **kwargs)`, whose result is named `name`.

    args (or, as the earlier TensorTorrent spelled it, `inputs`) and kwargs hold references
    (GraphInput, NodeOutput), constants, and lists, tuples and dicts of those. Their
    containers are copied, so later changes to the caller's lists and dicts do not reach
    the node; modules and tensors are shared, not copied.
    """

    __slots__ = ("name", "module", "args", "kwargs")

    def __init__(
        self, name: str, module: nn.Module, args: tuple = (), kwargs: dict[str, Any] | None = None, *, inputs=None
    ) -> None:
        check_node_name(name)
        where = f"node {name!r}"
        if not isinstance(module, nn.Module):
            module_type = type(module)
            raise GraphDefinitionTypeError(
                f"{where}: expected a torch.nn.Module, got {module_type.__module__}.{module_type.__qualname__}"
            )
        if inputs is not None:
            if args != ():
                raise GraphDefinitionError(f"{where}: give args or inputs (the same thing), not both")
            args = inputs
        if not isinstance(args, (tuple, list)):
            raise GraphDefinitionTypeError(f"{where}: args must be a tuple, got {type(args).__name__}")
        kwargs = {} if kwargs is None else kwargs
        if not isinstance(kwargs, dict):
            raise GraphDefinitionTypeError(f"{where}: kwargs must be a dict, got {type(kwargs).__name__}")
        self.name, self.module = name, module
        self.args = copy_structure(tuple(args), f"{where} args")
        self.kwargs = copy_structure(kwargs, f"{where} kwargs")

    @property
    def inputs(self) -> tuple:
        """The positional arguments: the earlier TensorTorrent's name for args."""
        return self.args

    def __repr__(self) -> str:
        return (
            f"ModuleNode({self.name!r}, {type(self.module).__qualname__}, args={self.args!r}, kwargs={self.kwargs!r})"
        )


class ModuleGraph(nn.Module):
    """Modules wired into one composition: an nn.Module that runs them, which tt.compile
    captures and compiles as a whole.

    nodes run in the given order, which must be topological: a node reads only graph
    inputs and the outputs of nodes before it. outputs is a reference, a constant, or
    lists, tuples and dicts of those; calls return it with the same container types. By
    default it is the last node's output. Everything is checked here, before any export,
    and the containers are copied.

    Each node's module is a submodule under the node's name, so parameter names start
    with it (encoder.0.weight), eval() and train() reach it, and the graph's parameters are
    its modules'. A module that several nodes call is one object under several names: its
    weights are shared, and tt.compile binds them once (explain() says tied). The forward
    is plain Python over a fixed structure, which torch.export traces through.
    """

    def __init__(self, nodes: list[ModuleNode], outputs: Any = None) -> None:
        super().__init__()
        if not isinstance(nodes, (list, tuple)):
            raise GraphDefinitionTypeError(
                f"ModuleGraph: nodes must be a list of ModuleNode, got {type(nodes).__name__}"
            )
        if not nodes:
            raise GraphDefinitionError("ModuleGraph: the graph is empty; it needs at least one node")
        for index, node in enumerate(nodes):
            if not isinstance(node, ModuleNode):
                raise GraphDefinitionTypeError(
                    f"ModuleGraph: nodes[{index}] must be a ModuleNode, got {type(node).__qualname__}"
                )
        # Rebuilt rather than shared: a node's kwargs is a dict the caller could still change.
        self.nodes: tuple[ModuleNode, ...] = tuple(ModuleNode(n.name, n.module, n.args, n.kwargs) for n in nodes)
        self.outputs = NodeOutput(self.nodes[-1].name) if outputs is None else copy_structure(outputs, "outputs")
        _check_references(self.nodes, self.outputs)
        for node in self.nodes:
            self.add_module(node.name, node.module)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        results: dict[str, Any] = {}
        for node in self.nodes:
            node_args = resolve(node.args, args, kwargs, results)
            node_kwargs = resolve(node.kwargs, args, kwargs, results)
            results[node.name] = getattr(self, node.name)(*node_args, **node_kwargs)
        return resolve(self.outputs, args, kwargs, results)

    def extra_repr(self) -> str:
        return f"outputs={self.outputs!r}"


def checked(graph: ModuleGraph, args: tuple, kwargs: dict) -> ModuleGraph:
    """The graph, run once on the example inputs in eval mode to check its references.

    Whether a path selects something inside a node's output, or a GraphInput exists, can
    only be known once there are outputs and inputs: this run is the first, and it raises
    GraphDefinitionError naming the reference, before export would bury it in a trace.
    Buffers the run writes (counters, caches) are restored: compiling must not count as a call.
    """
    saved_buffers = [(buffer, buffer.clone()) for buffer in graph.buffers()]
    with eval_mode(graph), torch.no_grad():
        try:
            graph(*args, **kwargs)
        finally:
            for buffer, saved in saved_buffers:
                buffer.copy_(saved)
    return graph


def series(modules: object, names: object, positional_inputs: int, keyword_inputs: list[str]) -> ModuleGraph:
    """modules[0](*inputs, **keyword inputs), then each next module called on the previous one's output."""
    if not isinstance(modules, (list, tuple)):
        raise GraphDefinitionTypeError(
            f"tt.compile_modules: modules must be a list of nn.Module, got {type(modules).__name__}"
        )
    names = [f"m{index}" for index in range(len(modules))] if names is None else names
    if not isinstance(names, (list, tuple)):
        raise GraphDefinitionTypeError(f"tt.compile_modules: names must be a list of str, got {type(names).__name__}")
    if len(names) != len(modules):
        raise GraphDefinitionError(f"tt.compile_modules: {len(names)} name(s) for {len(modules)} module(s)")
    nodes = []
    for index, (name, module) in enumerate(zip(names, modules)):
        if index == 0:
            inputs = tuple(GraphInput(i) for i in range(positional_inputs))
            nodes.append(ModuleNode(name, module, inputs, {key: GraphInput(key) for key in keyword_inputs}))
        else:
            nodes.append(ModuleNode(name, module, (NodeOutput(names[index - 1]),)))
    return ModuleGraph(nodes, NodeOutput(nodes[-1].name) if nodes else None)


def check_node_name(name: object) -> None:
    """A node name must be usable as a submodule name: a non-empty str without dots, not reserved."""
    if not isinstance(name, str):
        raise GraphDefinitionTypeError(f"ModuleNode: the name must be a str, got {type(name).__name__} ({name!r})")
    if not name or "." in name:
        raise GraphDefinitionError(
            f"ModuleNode {name!r}: a node name must be non-empty and without '.', since it becomes a submodule name"
        )
    if name in RESERVED_NAMES:
        raise GraphDefinitionError(f"ModuleNode {name!r}: the name is reserved (a torch.nn.Module attribute, or graph)")


def _check_references(nodes: tuple[ModuleNode, ...], outputs: Any) -> None:
    position: dict[str, int] = {}
    for index, node in enumerate(nodes):
        if node.name in position:
            raise GraphDefinitionError(
                f"ModuleGraph: duplicate node name {node.name!r} (nodes[{position[node.name]}] and nodes[{index}])"
            )
        position[node.name] = index
    for node in nodes:
        for reference in node_outputs_in((node.args, node.kwargs)):
            if reference.node not in position:
                raise GraphDefinitionError(
                    f"node {node.name!r} reads {reference!r}, but no node is named {reference.node!r}"
                )
            if reference.node == node.name:
                raise GraphDefinitionError(f"node {node.name!r} reads its own output ({reference!r})")
            if position[reference.node] > position[node.name]:
                raise GraphDefinitionError(
                    f"node {node.name!r} reads {reference!r}, so {reference.node!r} must come before {node.name!r} "
                    "in topological order"
                )
    for reference in node_outputs_in(outputs):
        if reference.node not in position:
            raise GraphDefinitionError(f"outputs read {reference!r}, but no node is named {reference.node!r}")

"""ModuleGraph: modules wired together by references, checked and copied on construction."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..errors import GraphDefinitionError, GraphDefinitionTypeError

CONSTANT_TYPES = (bool, int, float, str, type(None), torch.Tensor)

# A node's module becomes an attribute of the composed module under the node's name, so
# the name cannot be one nn.Module already uses, nor `graph`, where the composed module
# keeps its ModuleGraph.
RESERVED_NAMES = frozenset(dir(nn.Module())) | {"graph"}

VALUE_KINDS = (
    "a GraphInput, a NodeOutput, a constant (number, bool, None, str, tensor) or a list, tuple or dict of those"
)


@dataclass(frozen=True, repr=False)
class GraphInput:
    """An input of the composition: an int indexes the positional inputs, a str names a keyword input."""

    name_or_index: int | str

    def __post_init__(self) -> None:
        key = self.name_or_index
        if isinstance(key, bool) or not isinstance(key, (int, str)):
            raise GraphDefinitionTypeError(
                f"GraphInput: expected an int index or a str name, got {type(key).__name__} ({key!r})"
            )
        if isinstance(key, int) and key < 0:
            raise GraphDefinitionError(f"GraphInput: a positional index must be >= 0, got {key}")

    def __repr__(self) -> str:
        return f"GraphInput({self.name_or_index!r})"


@dataclass(frozen=True, repr=False)
class NodeOutput:
    """The output of node `node`, or the part of it that `path` selects, step by step.

    A str step is a mapping key or, failing that, an attribute (a ModelOutput field); an
    int step is a sequence index. NodeOutput("split", ("pair", 1)) is output["pair"][1].
    """

    node: str
    path: tuple[str | int, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.node, str):
            raise GraphDefinitionTypeError(
                f"NodeOutput: expected a node name (str), got {type(self.node).__name__} ({self.node!r})"
            )
        if not isinstance(self.path, (tuple, list)):
            raise GraphDefinitionTypeError(
                f"NodeOutput({self.node!r}): path must be a tuple of str keys and int indices, "
                f"got {type(self.path).__name__} ({self.path!r})"
            )
        for step in self.path:
            if isinstance(step, bool) or not isinstance(step, (str, int)):
                raise GraphDefinitionTypeError(
                    f"NodeOutput({self.node!r}): a path step must be a str key or an int index, "
                    f"got {type(step).__name__} ({step!r})"
                )
        object.__setattr__(self, "path", tuple(self.path))

    def __repr__(self) -> str:
        return f"NodeOutput({self.node!r}, {self.path!r})" if self.path else f"NodeOutput({self.node!r})"


@dataclass(frozen=True, eq=False)
class ModuleNode:
    """One call in a ModuleGraph, `module(*args, **kwargs)`, whose result is named `name`.

    args and kwargs hold references (GraphInput, NodeOutput), constants, and lists, tuples
    and dicts of those. Their containers are copied, so later changes to the caller's
    lists and dicts do not reach the node; modules and tensors are shared, not copied.
    """

    name: str
    module: nn.Module
    args: tuple = ()
    kwargs: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        check_node_name(self.name)
        where = f"node {self.name!r}"
        if not isinstance(self.module, nn.Module):
            module_type = type(self.module)
            raise GraphDefinitionTypeError(
                f"{where}: expected a torch.nn.Module, got {module_type.__module__}.{module_type.__qualname__}"
            )
        if not isinstance(self.args, (tuple, list)):
            raise GraphDefinitionTypeError(f"{where}: args must be a tuple, got {type(self.args).__name__}")
        kwargs = {} if self.kwargs is None else self.kwargs
        if not isinstance(kwargs, dict):
            raise GraphDefinitionTypeError(f"{where}: kwargs must be a dict, got {type(kwargs).__name__}")
        object.__setattr__(self, "args", copy_structure(tuple(self.args), f"{where} args"))
        object.__setattr__(self, "kwargs", copy_structure(kwargs, f"{where} kwargs"))


class ModuleGraph:
    """Modules wired into one composition that tt.compile captures and runs as a whole.

    nodes run in the given order, which must be topological: a node reads only graph
    inputs and the outputs of nodes before it. outputs is a reference, a constant, or
    lists, tuples and dicts of those; calls return it with the same container types.
    Everything is checked here, before any export, and the containers are copied.
    """

    def __init__(self, nodes: list[ModuleNode], outputs: Any) -> None:
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
        self.outputs = copy_structure(outputs, "outputs")
        _check_references(self.nodes, self.outputs)

    def __repr__(self) -> str:
        return f"ModuleGraph(nodes={[node.name for node in self.nodes]}, outputs={self.outputs!r})"


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


def copy_structure(value: Any, where: str) -> Any:
    """`value` with its lists, tuples and dicts copied; raises, naming `where`, on anything else unsupported."""
    if isinstance(value, (GraphInput, NodeOutput, *CONSTANT_TYPES)):
        return value
    if type(value) in (list, tuple):
        return type(value)(copy_structure(item, f"{where}[{index}]") for index, item in enumerate(value))
    if type(value) is dict:
        for key in value:
            if not isinstance(key, str):
                raise GraphDefinitionTypeError(f"{where}: dict keys must be str, got {type(key).__name__} ({key!r})")
        return {key: copy_structure(item, f"{where}[{key!r}]") for key, item in value.items()}
    raise GraphDefinitionTypeError(f"{where}: unsupported {type(value).__qualname__}; expected {VALUE_KINDS}")


def node_outputs_in(value: Any) -> Iterator[NodeOutput]:
    """The NodeOutput references in a copied structure."""
    if isinstance(value, NodeOutput):
        yield value
    elif type(value) in (list, tuple):
        for item in value:
            yield from node_outputs_in(item)
    elif type(value) is dict:
        for item in value.values():
            yield from node_outputs_in(item)


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

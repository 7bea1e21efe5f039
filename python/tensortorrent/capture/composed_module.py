"""ComposedModule: the nn.Module that runs a ModuleGraph, so that tt.compile captures it as one model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from ..errors import GraphDefinitionError
from .export import eval_mode
from .module_graph import GraphInput, ModuleGraph, NodeOutput

_NOTHING = object()


class ComposedModule(nn.Module):
    """Calls a ModuleGraph's nodes in order, resolving their references, and returns its outputs.

    Each node's module is a submodule under the node's name, so parameter names start with
    it (encoder.0.weight). A module that several nodes call is one object under several
    names: its weights are shared, and tt.compile binds them once (explain() says tied).
    The forward is plain Python over a fixed structure, which torch.export traces through.
    """

    def __init__(self, graph: ModuleGraph) -> None:
        super().__init__()
        self.graph = graph
        for node in graph.nodes:
            self.add_module(node.name, node.module)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        results: dict[str, Any] = {}
        for node in self.graph.nodes:
            node_args = resolve(node.args, args, kwargs, results)
            node_kwargs = resolve(node.kwargs, args, kwargs, results)
            results[node.name] = getattr(self, node.name)(*node_args, **node_kwargs)
        return resolve(self.graph.outputs, args, kwargs, results)


def compose(graph: ModuleGraph, args: tuple, kwargs: dict) -> ComposedModule:
    """The graph as a module, run once on the example inputs in eval mode to check its references.

    Whether a path selects something inside a node's output, or a GraphInput exists, can
    only be known once there are outputs and inputs: this run is the first, and it raises
    GraphDefinitionError naming the reference, before export would bury it in a trace.
    Buffers the run writes (counters, caches) are restored: compiling must not count as a call.
    """
    composed = ComposedModule(graph)
    saved_buffers = [(buffer, buffer.clone()) for buffer in composed.buffers()]
    with eval_mode(composed), torch.no_grad():
        try:
            composed(*args, **kwargs)
        finally:
            for buffer, saved in saved_buffers:
                buffer.copy_(saved)
    return composed


def resolve(value: Any, args: tuple, kwargs: dict, results: dict[str, Any]) -> Any:
    """`value` with its references replaced by what they refer to, containers rebuilt with their types."""
    if isinstance(value, NodeOutput):
        return select(results[value.node], value)
    if isinstance(value, GraphInput):
        return _graph_input(value, args, kwargs)
    if type(value) in (list, tuple):
        return type(value)(resolve(item, args, kwargs, results) for item in value)
    if type(value) is dict:
        return {key: resolve(item, args, kwargs, results) for key, item in value.items()}
    return value


def select(output: Any, reference: NodeOutput) -> Any:
    """The part of a node's output that the reference's path selects, or GraphDefinitionError."""
    value = output
    for depth, step in enumerate(reference.path):
        selected = _step(value, step)
        if selected is _NOTHING:
            where = "output" + "".join(f"[{s!r}]" for s in reference.path[:depth])
            kind = "index" if isinstance(step, int) else "key or attribute"
            raise GraphDefinitionError(
                f"{reference!r} selects nothing: {where} of node {reference.node!r} has no {kind} {step!r}; "
                f"it is {_describe(value)}"
            )
        value = selected
    return value


def _step(value: Any, step: str | int) -> Any:
    if isinstance(step, int):
        if isinstance(value, Mapping) and callable(getattr(value, "to_tuple", None)):
            value = value.to_tuple()  # a ModelOutput: indices count its fields that are set, as output[0] does
        if isinstance(value, Sequence) and not isinstance(value, str) and -len(value) <= step < len(value):
            return value[step]
        return _NOTHING
    if isinstance(value, Mapping) and step in value:
        return value[step]
    attribute = getattr(value, step, _NOTHING)
    # A method of the container (dict.keys, tuple.count) is not a part of the output.
    return _NOTHING if callable(attribute) else attribute


def _describe(value: Any) -> str:
    kind = type(value).__qualname__
    if isinstance(value, Mapping):
        return f"a {kind} with keys {list(value)}"
    if isinstance(value, Sequence) and not isinstance(value, str):
        return f"a {kind} of length {len(value)}"
    return f"a {kind}"


def _graph_input(reference: GraphInput, args: tuple, kwargs: dict) -> Any:
    key = reference.name_or_index
    if isinstance(key, int):
        if key < len(args):
            return args[key]
        raise GraphDefinitionError(f"{reference!r}: the composition was called with {len(args)} positional input(s)")
    if key in kwargs:
        return kwargs[key]
    raise GraphDefinitionError(
        f"{reference!r}: the composition was called without keyword input {key!r} (got {sorted(kwargs)})"
    )

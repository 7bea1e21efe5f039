"""The values a ModuleGraph wires: references to graph inputs and node outputs, the
constants and containers around them, copied when a graph is built and resolved when it runs."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import GraphDefinitionError, GraphDefinitionTypeError

CONSTANT_TYPES = (bool, int, float, str, type(None), torch.Tensor)

VALUE_KINDS = (
    "a GraphInput, a NodeOutput, a constant (number, bool, None, str, tensor) or a list, tuple or dict of those"
)

_NOTHING = object()


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

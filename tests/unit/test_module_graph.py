"""A ModuleGraph is checked on construction, naming the problem, and copies what it is given."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tensortorrent as tt
from tensortorrent import GraphInput, ModuleGraph, ModuleNode, NodeOutput


def linear() -> nn.Module:
    return nn.Linear(4, 4)


class Split(nn.Module):
    def forward(self, x):
        return {"positive": x.relu(), "pair": (x, -x)}


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: ModuleGraph([], NodeOutput("a")), "the graph is empty"),
        (
            lambda: ModuleGraph(
                [ModuleNode("a", linear(), (NodeOutput("b"),)), ModuleNode("b", linear(), (GraphInput(0),))],
                NodeOutput("a"),
            ),
            r"node 'a' reads NodeOutput\('b'\), so 'b' must come before 'a' in topological order",
        ),
        (
            lambda: ModuleGraph([ModuleNode("a", linear(), (NodeOutput("a"),))], NodeOutput("a")),
            r"node 'a' reads its own output",
        ),
        (
            lambda: ModuleGraph([ModuleNode("a", linear(), ([NodeOutput("ghost")],))], NodeOutput("a")),
            r"node 'a' reads NodeOutput\('ghost'\), but no node is named 'ghost'",
        ),
        (
            lambda: ModuleGraph([ModuleNode("a", linear(), (GraphInput(0),))], {"y": NodeOutput("ghost", ("x",))}),
            r"outputs read NodeOutput\('ghost', \('x',\)\), but no node is named 'ghost'",
        ),
        (
            lambda: ModuleGraph(
                [ModuleNode("a", linear(), (GraphInput(0),)), ModuleNode("a", linear(), (NodeOutput("a"),))],
                NodeOutput("a"),
            ),
            r"duplicate node name 'a' \(nodes\[0\] and nodes\[1\]\)",
        ),
        (lambda: ModuleNode("", linear()), "must be non-empty and without '.'"),
        (lambda: ModuleNode("enc.0", linear()), "must be non-empty and without '.'"),
        (lambda: ModuleNode("forward", linear()), r"the name is reserved \(a torch.nn.Module attribute"),
        (lambda: ModuleNode("nodes", linear()), "the name is reserved"),
        (lambda: GraphInput(-1), "must be >= 0, got -1"),
        (lambda: tt.compile_modules([linear(), linear()], (torch.randn(2, 4),), names=["a"]), r"1 name\(s\) for 2"),
        (lambda: tt.compile_modules([linear(), linear()], (torch.randn(2, 4),), names=["a", "a"]), "duplicate"),
        (lambda: tt.compile_modules([], (torch.randn(2, 4),)), "the graph is empty"),
    ],
    ids=[
        "empty",
        "later-node",
        "own-output",
        "missing-node",
        "missing-node-in-outputs",
        "duplicate-name",
        "empty-name",
        "dotted-name",
        "reserved-name",
        "graph-attribute",
        "negative-input",
        "too-few-names",
        "duplicate-names",
        "no-modules",
    ],
)
def test_malformed_graph_raises_value_error(build, message):
    with pytest.raises(ValueError, match=message) as caught:
        build()
    assert isinstance(caught.value, tt.GraphDefinitionError)
    assert isinstance(caught.value, tt.TensorTorrentError)


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: ModuleNode("a", lambda x: x), r"node 'a': expected a torch.nn.Module, got builtins.function"),
        (lambda: ModuleNode(3, linear()), r"the name must be a str, got int \(3\)"),
        (lambda: ModuleNode("a", linear(), GraphInput(0)), "node 'a': args must be a tuple, got GraphInput"),
        (
            lambda: ModuleNode("a", linear(), ({1: GraphInput(0)},)),
            r"node 'a' args\[0\]: dict keys must be str, got int \(1\)",
        ),
        (
            lambda: ModuleNode("a", linear(), kwargs={"x": {("k",): GraphInput(0)}}),
            r"node 'a' kwargs\['x'\]: dict keys must be str, got tuple",
        ),
        (
            lambda: ModuleGraph([ModuleNode("a", linear(), (GraphInput(0),))], {0: NodeOutput("a")}),
            r"outputs: dict keys must be str, got int \(0\)",
        ),
        (lambda: ModuleNode("a", linear(), ({"x"},)), r"node 'a' args\[0\]: unsupported set"),
        (lambda: ModuleGraph([linear()], NodeOutput("a")), r"nodes\[0\] must be a ModuleNode, got Linear"),
        (lambda: NodeOutput(0), r"expected a node name \(str\), got int"),
        (lambda: NodeOutput("a", "positive"), "path must be a tuple of str keys and int indices, got str"),
        (lambda: NodeOutput("a", (1.5,)), r"a path step must be a str key or an int index, got float \(1.5\)"),
        (lambda: GraphInput(True), "expected an int index or a str name, got bool"),
        (lambda: tt.compile_modules([linear()], (torch.randn(2, 4),), names=[7]), "the name must be a str, got int"),
        (lambda: tt.compile_modules(linear(), (torch.randn(2, 4),)), "modules must be a list of nn.Module"),
    ],
    ids=[
        "not-a-module",
        "name-not-str",
        "args-not-tuple",
        "args-key-not-str",
        "kwargs-nested-key-not-str",
        "outputs-key-not-str",
        "unsupported-value",
        "node-not-a-module-node",
        "node-output-name-not-str",
        "path-not-tuple",
        "path-step-float",
        "graph-input-bool",
        "series-name-not-str",
        "series-not-a-list",
    ],
)
def test_wrongly_typed_graph_raises_type_error(build, message):
    with pytest.raises(TypeError, match=message) as caught:
        build()
    assert isinstance(caught.value, tt.GraphDefinitionTypeError)


@pytest.mark.parametrize(
    "outputs, message",
    [
        (NodeOutput("split", ("negative",)), r"NodeOutput\('split', \('negative',\)\) selects nothing: output of node"),
        (NodeOutput("split", ("pair", 2)), r"output\['pair'\] of node 'split' has no index 2; it is a tuple of len"),
        (NodeOutput("split", ("keys",)), r"no key or attribute 'keys'; it is a dict with keys \['positive', 'pair'\]"),
        (NodeOutput("split", ("pair", 0, "x")), r"output\['pair'\]\[0\] of node 'split' has no key or attribute 'x'"),
    ],
    ids=["missing-key", "index-out-of-range", "method-is-not-an-output", "into-a-tensor"],
)
def test_path_that_selects_nothing_fails_at_compile_naming_node_and_path(outputs, message):
    graph = ModuleGraph([ModuleNode("split", Split(), (GraphInput(0),))], outputs)
    with pytest.raises(ValueError, match=message) as caught:
        tt.compile(graph, example_inputs=(torch.randn(2, 4),))
    assert isinstance(caught.value, tt.GraphDefinitionError)


@pytest.mark.parametrize(
    "reference, message",
    [
        (GraphInput(1), r"GraphInput\(1\): the composition was called with 1 positional input"),
        (GraphInput("mask"), r"GraphInput\('mask'\): the composition was called without keyword input 'mask'"),
    ],
)
def test_graph_input_missing_from_the_example_inputs_fails_at_compile(reference, message):
    graph = ModuleGraph([ModuleNode("a", linear(), (reference,))], NodeOutput("a"))
    with pytest.raises(tt.GraphDefinitionError, match=message):
        tt.compile(graph, example_inputs=(torch.randn(2, 4),))


def test_definitions_are_copied_at_construction():
    first, second = linear(), linear()
    args = (GraphInput(0), [GraphInput(1)])
    kwargs = {"scale": {"by": [2.0]}}
    nodes = [ModuleNode("a", first, args, kwargs), ModuleNode("b", second, (NodeOutput("a"),))]
    outputs = {"out": [NodeOutput("b")]}
    graph = ModuleGraph(nodes, outputs)

    args[1].append(GraphInput(2))
    kwargs["scale"]["by"][0] = 3.0
    kwargs["extra"] = 1
    nodes[0].kwargs["late"] = 2  # the node's own dict: the graph copied it too
    nodes.append(ModuleNode("c", linear(), (NodeOutput("b"),)))
    outputs["out"].append(NodeOutput("c"))
    outputs["more"] = NodeOutput("a")

    assert [node.name for node in graph.nodes] == ["a", "b"]
    assert graph.nodes[0].args == (GraphInput(0), [GraphInput(1)])
    assert graph.nodes[0].kwargs == {"scale": {"by": [2.0]}}
    assert graph.outputs == {"out": [NodeOutput("b")]}
    # Modules and tensors are shared, not copied: the graph runs the caller's modules.
    assert graph.nodes[0].module is first and graph.nodes[1].module is second


def test_constant_tensors_are_shared_not_copied():
    weight = torch.randn(4)
    graph = ModuleGraph([ModuleNode("a", linear(), (GraphInput(0),), {"unused": [weight]})], NodeOutput("a"))
    assert graph.nodes[0].kwargs["unused"][0] is weight


class CallCounter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.calls += 1
        return x * 2


def test_compiling_a_graph_leaves_its_buffers_as_they_were():
    counter = CallCounter()
    graph = ModuleGraph([ModuleNode("count", counter, (GraphInput(0),))], NodeOutput("count"))
    compiled = tt.compile(graph, example_inputs=(torch.randn(2, 4),))
    assert counter.calls.item() == 0, "the check run at compile time must not count as a call"
    compiled(torch.randn(2, 4))
    assert counter.calls.item() == 1


def test_series_names_default_to_m0_m1():
    compiled = tt.compile_modules([linear(), linear()], (torch.randn(2, 4),))
    assert [name for name, _ in compiled.model.named_parameters()] == ["m0.weight", "m0.bias", "m1.weight", "m1.bias"]

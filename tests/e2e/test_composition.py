"""Composed modules give the same outputs as the same composition written by hand in eager PyTorch."""

from __future__ import annotations

import pytest
import torch
import torch.utils._pytree as pytree
from torch import nn

import tensortorrent as tt
from tensortorrent import GraphInput, ModuleGraph, ModuleNode, NodeOutput

SPLIT = tt.CompileConfig(max_region_nodes=2)  # many regions: exercises the executor path


class Add(nn.Module):
    def forward(self, a, b):
        return a + b


class Scale(nn.Module):
    """Takes constants of several kinds, so that they must reach it unchanged."""

    def forward(self, x, factor, activation, *, shift, negate, offset):
        y = getattr(torch, activation)(x * factor + shift + offset)
        return -y if negate else y


class SignSplit(nn.Module):
    def forward(self, x):
        return {"positive": x.relu(), "negative": (-x).relu(), "pair": (x.sin(), x.cos())}


def mlp(width: int = 16) -> nn.Module:
    return nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width))


def check_parity(model, eager, args: tuple, kwargs: dict | None = None, config=None, compile=tt.compile):
    """Compiles `model` (a ModuleGraph, or modules for compile_modules) and compares with `eager(*args, **kwargs)`."""
    compiled = compile(model, example_inputs=args, example_kwargs=kwargs, config=config)
    with torch.no_grad():
        expected = eager(*args, **(kwargs or {}))
    got = compiled(*args, **(kwargs or {}))
    torch.testing.assert_close(got, expected)
    # assert_close accepts a list for a tuple; the composition must keep the container types.
    assert pytree.tree_structure(got) == pytree.tree_structure(expected)
    if config is SPLIT:
        assert compiled.region_count > 1 and not compiled.uses_direct_path
    return compiled


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


@pytest.mark.parametrize("config", [None, SPLIT], ids=["default", "split"])
class TestComposition:
    def test_series_of_three(self, config):
        modules = [mlp(), nn.Tanh(), nn.Linear(16, 4)]
        compiled = check_parity(
            modules,
            lambda x: modules[2](modules[1](modules[0](x))),
            (torch.randn(3, 16),),
            config=config,
            compile=tt.compile_modules,
        )
        assert "m2.weight" in dict(compiled.model.named_parameters())

    def test_branches_and_join(self, config):
        left, right, join = mlp(), mlp(), Add()
        graph = ModuleGraph(
            [
                ModuleNode("left", left, (GraphInput(0),)),
                ModuleNode("right", right, (GraphInput(0),)),
                ModuleNode("join", join, (NodeOutput("left"), NodeOutput("right"))),
            ],
            NodeOutput("join"),
        )
        check_parity(graph, lambda x: left(x) + right(x), (torch.randn(3, 16),), config=config)

    def test_paths_into_a_dict_and_a_tuple(self, config):
        split, up, down, join = SignSplit(), mlp(), mlp(), Add()
        graph = ModuleGraph(
            [
                ModuleNode("split", split, (GraphInput(0),)),
                ModuleNode("up", up, (NodeOutput("split", ("positive",)),)),
                ModuleNode("down", down, (NodeOutput("split", ("pair", 1)),)),
                ModuleNode("join", join, (NodeOutput("up"), NodeOutput("down"))),
            ],
            (NodeOutput("join"), NodeOutput("split", ("negative",)), NodeOutput("split", ("pair", -2))),
        )

        def eager(x):
            parts = split(x)
            return up(parts["positive"]) + down(parts["pair"][1]), parts["negative"], parts["pair"][0]

        check_parity(graph, eager, (torch.randn(3, 16),), config=config)

    def test_dict_and_nested_list_tuple_outputs(self, config):
        first, second = mlp(), nn.Linear(16, 4)
        graph = ModuleGraph(
            [ModuleNode("first", first, (GraphInput(0),)), ModuleNode("second", second, (NodeOutput("first"),))],
            {"hidden": NodeOutput("first"), "nested": [NodeOutput("second"), (NodeOutput("first"), [GraphInput(0)])]},
        )

        def eager(x):
            hidden = first(x)
            return {"hidden": hidden, "nested": [second(hidden), (hidden, [x])]}

        compiled = check_parity(graph, eager, (torch.randn(3, 16),), config=config)
        out = compiled(torch.randn(3, 16))
        assert isinstance(out, dict) and isinstance(out["nested"], list) and isinstance(out["nested"][1], tuple)

    def test_keyword_input_and_constants_in_args(self, config):
        body, scale = mlp(), Scale()
        offset = torch.linspace(-1.0, 1.0, 16)
        graph = ModuleGraph(
            [
                ModuleNode("body", body, (GraphInput(0),)),
                ModuleNode(
                    "scale",
                    scale,
                    (NodeOutput("body"), 0.5, "tanh"),
                    {"shift": GraphInput("shift"), "negate": True, "offset": offset},
                ),
            ],
            {"out": NodeOutput("scale"), "count": 2, "none": None},
        )

        def eager(x, *, shift):
            return {"out": -torch.tanh(body(x) * 0.5 + shift + offset), "count": 2, "none": None}

        check_parity(graph, eager, (torch.randn(3, 16),), {"shift": torch.randn(16)}, config=config)

    def test_module_used_twice_shares_its_weights(self, config):
        shared, other = nn.Linear(16, 16), nn.Linear(16, 16)
        graph = ModuleGraph(
            [
                ModuleNode("first", shared, (GraphInput(0),)),
                ModuleNode("act", nn.ReLU(), (NodeOutput("first"),)),
                ModuleNode("again", shared, (NodeOutput("act"),)),
                ModuleNode("other", other, (NodeOutput("again"),)),
            ],
            NodeOutput("other"),
        )
        compiled = check_parity(
            graph, lambda x: other(shared(torch.relu(shared(x)))), (torch.randn(3, 16),), config=config
        )
        # The shared Linear's weight and bias count once: 2 tensors for it, 2 for `other`.
        assert len(list(compiled.model.parameters())) == 4
        assert compiled.model.first is compiled.model.again is shared
        assert "2 tied" in compiled.explain()


@pytest.mark.parametrize("config", [None, SPLIT], ids=["default", "split"])
def test_transformers_model_as_one_node(config):
    pytest.importorskip("transformers")
    from e2e.test_parity_transformers import bert as small_bert

    bert, head = small_bert(), nn.Linear(64, 3)
    graph = ModuleGraph(
        [
            ModuleNode("bert", bert, (GraphInput(0),), {"attention_mask": GraphInput("attention_mask")}),
            ModuleNode("head", head, (NodeOutput("bert", (0,)),)),  # by index, as bert(ids)[0]
        ],
        {"logits": NodeOutput("head"), "pooled": NodeOutput("bert", ("pooler_output",))},
    )

    def eager(ids, *, attention_mask):
        out = bert(ids, attention_mask=attention_mask)
        return {"logits": head(out.last_hidden_state), "pooled": out.pooler_output}

    ids = torch.randint(0, 128, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 8:] = 0
    compiled = check_parity(graph, eager, (ids,), {"attention_mask": mask}, config=config)
    assert "bert.encoder.layer.0.attention.self.query.weight" in dict(compiled.model.named_parameters())

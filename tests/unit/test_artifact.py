"""Artifacts round-trip every spine model, replay the saved plan, and re-plan elsewhere."""

from __future__ import annotations

import pytest
import torch
from e2e.test_parity_modules import (
    BatchNormDropout,
    DictAndNestedOutputs,
    SharedWeight,
    ThreeInputsAndKeyword,
    TwoBranchResidual,
    WithBuffer,
    mlp,
)
from torch import nn

import tensortorrent as tt
from conftest import eager_outputs

SPLIT = tt.CompileConfig(max_region_nodes=2)


def cases():
    """(name, model, args, kwargs) for every model of the spine's parity list."""
    torch.manual_seed(0)
    three = (torch.randn(2, 8), torch.randn(2, 8), torch.randn(2, 8))
    return [
        ("linear", nn.Linear(16, 4), (torch.randn(3, 16),), None),
        ("mlp-relu", mlp(nn.ReLU), (torch.randn(5, 32),), None),
        ("mlp-gelu", mlp(nn.GELU), (torch.randn(5, 32),), None),
        ("residual", TwoBranchResidual(), (torch.randn(4, 16),), None),
        ("three-inputs", ThreeInputsAndKeyword(), three, {"scale": torch.randn(2, 8)}),
        ("nested-outputs", DictAndNestedOutputs(), (torch.randn(3, 8),), None),
        ("buffer", WithBuffer(), (torch.randn(2, 8),), None),
        ("shared-weight", SharedWeight(), (torch.randint(0, 20, (2, 5)),), None),
        ("batchnorm-dropout", BatchNormDropout(), (torch.randn(6, 8),), None),
        ("transformer-layer", nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), (torch.randn(2, 6, 32),), None),
    ]


@pytest.mark.parametrize("config", [None, SPLIT], ids=["default", "split"])
@pytest.mark.parametrize("case", range(len(cases())), ids=[c[0] for c in cases()])
def test_round_trip(tmp_path, case, config):
    _, model, args, kwargs = cases()[case]
    compiled = tt.compile(model, example_inputs=args, example_kwargs=kwargs, config=config)
    compiled.save(tmp_path / "artifact")
    loaded = tt.load_compiled(tmp_path / "artifact")
    expected = eager_outputs(model, args, kwargs)
    torch.testing.assert_close(loaded(*args, **(kwargs or {})), expected)
    assert loaded.region_count == compiled.region_count
    assert loaded.uses_direct_path == compiled.uses_direct_path


def test_loaded_weights_are_aligned_and_the_file_is_standard_safetensors(tmp_path):
    safetensors = pytest.importorskip("safetensors.torch")
    torch.manual_seed(0)
    # Odd sizes (7 and 3 floats) would leave the tensors after them unaligned if packed in name order.
    model = nn.Sequential(nn.Linear(5, 7), nn.Linear(7, 3), nn.Linear(3, 64), nn.LayerNorm(64))
    args = (torch.randn(2, 5),)
    tt.compile(model, example_inputs=args).save(tmp_path / "a")
    loaded = tt.load_compiled(tmp_path / "a")
    assert all(p.data_ptr() % 64 == 0 for p in loaded.model.parameters())
    reference = safetensors.load_file(tmp_path / "a" / "weights.safetensors")  # the reference reader accepts it
    assert {k: v.shape for k, v in reference.items()} == {k: v.shape for k, v in model.state_dict().items()}
    torch.testing.assert_close(loaded(*args), eager_outputs(model, args, None))


def test_tied_weights_stay_tied(tmp_path):
    model = SharedWeight()
    tt.compile(model, example_inputs=(torch.randint(0, 20, (2, 5)),)).save(tmp_path / "a")
    loaded = tt.load_compiled(tmp_path / "a")
    assert loaded.model.embed.weight is loaded.model.head.weight
    assert "1 tied" in loaded.explain()


def test_replay_does_not_plan(tmp_path, monkeypatch):
    model, x = TwoBranchResidual(), torch.randn(4, 16)
    compiled = tt.compile(model, example_inputs=(x,), config=SPLIT)
    compiled.save(tmp_path / "a")

    def forbidden(*args, **kwargs):
        raise AssertionError("the planner ran during a replay")

    monkeypatch.setattr("tensortorrent.build.partition", forbidden)
    monkeypatch.setattr("tensortorrent.build.build_plan", forbidden)
    loaded = tt.load_compiled(tmp_path / "a")
    assert "saved plan replayed" in loaded.explain()
    torch.testing.assert_close(loaded(x), eager_outputs(model, (x,)))
    computes = [r for r in loaded.last_report.records if r.kind == "compute"]
    predicted = [(r.predicted_start_us, r.predicted_end_us) for r in computes]
    assert predicted == [(i.predicted_start_us, i.predicted_end_us) for i in compiled._plan.schedule.instructions]
    assert all(end > start >= 0 for start, end in predicted)


def test_other_hardware_re_plans_and_says_so(tmp_path, monkeypatch):
    model, x = TwoBranchResidual(), torch.randn(4, 16)
    tt.compile(model, example_inputs=(x,), config=SPLIT).save(tmp_path / "a")
    monkeypatch.setattr("tensortorrent.load.program.hardware_fingerprint", lambda: {"digest": "another-machine"})
    loaded = tt.load_compiled(tmp_path / "a")
    assert "re-planned (saved on hardware fingerprint" in loaded.explain()
    assert "this machine is another-machine" in loaded.explain()
    torch.testing.assert_close(loaded(x), eager_outputs(model, (x,)))


def test_a_new_config_re_plans(tmp_path):
    model, x = TwoBranchResidual(), torch.randn(4, 16)
    tt.compile(model, example_inputs=(x,)).save(tmp_path / "a")
    loaded = tt.load_compiled(tmp_path / "a", config=SPLIT)
    assert "a different CompileConfig was given" in loaded.explain() and loaded.region_count > 1
    torch.testing.assert_close(loaded(x), eager_outputs(model, (x,)))


def test_state_dict_round_trip_and_new_weights_change_outputs(tmp_path):
    model, x = TwoBranchResidual(), torch.randn(4, 16)
    compiled = tt.compile(model, example_inputs=(x,), config=SPLIT)
    compiled.save(tmp_path / "a")
    loaded = tt.load_compiled(tmp_path / "a")
    assert list(loaded.state_dict()) == list(compiled.state_dict())
    before = loaded(x)
    loaded.load_state_dict({k: torch.zeros_like(v) for k, v in compiled.state_dict().items()})
    assert torch.count_nonzero(loaded(x) - x) == 0, "zero weights leave only the residual"
    assert not torch.equal(loaded(x), before)
    compiled.load_state_dict({k: torch.zeros_like(v) for k, v in compiled.state_dict().items()})
    assert torch.count_nonzero(compiled(x) - x) == 0


def test_load_state_dict_is_strict(tmp_path):
    compiled = tt.compile(nn.Linear(4, 4), example_inputs=(torch.randn(2, 4),))
    state = compiled.state_dict()
    with pytest.raises(RuntimeError, match="Missing key"):
        compiled.load_state_dict({"model.weight": state["model.weight"]})
    with pytest.raises(RuntimeError, match="Unexpected key"):
        compiled.load_state_dict({**state, "model.extra": torch.zeros(1)})


@pytest.mark.parametrize("build", ["gpt2", "bert"])
def test_transformers_round_trip(tmp_path, build):
    from e2e.test_parity_transformers import bert, gpt2

    torch.manual_seed(0)
    model = {"gpt2": gpt2, "bert": bert}[build]()
    ids = torch.randint(0, 128, (2, 12))
    kwargs = {"use_cache": False} if build == "gpt2" else None
    tt.compile(model, example_inputs=(ids,), example_kwargs=kwargs).save(tmp_path / "a")
    loaded = tt.load_compiled(tmp_path / "a")
    torch.testing.assert_close(loaded(ids, **(kwargs or {})), eager_outputs(model, (ids,), kwargs))


def test_module_graph_round_trip(tmp_path):
    torch.manual_seed(0)
    left, right, x = nn.Linear(8, 8), nn.Linear(8, 4), torch.randn(3, 8)
    graph = tt.ModuleGraph(
        nodes=[
            tt.ModuleNode("left", left, args=(tt.GraphInput(0),)),
            tt.ModuleNode("right", right, args=(tt.NodeOutput("left"),)),
        ],
        outputs={"hidden": tt.NodeOutput("left"), "pair": [tt.NodeOutput("right"), tt.GraphInput(0)]},
    )
    tt.compile(graph, example_inputs=(x,)).save(tmp_path / "a")
    loaded = tt.load_compiled(tmp_path / "a")
    with torch.no_grad():
        expected = {"hidden": left(x), "pair": [right(left(x)), x]}
    torch.testing.assert_close(loaded(x), expected)

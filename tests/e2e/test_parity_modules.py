"""Compiled outputs match eager PyTorch on small architectures of every shape of graph."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tensortorrent as tt
from conftest import assert_parity

torch.manual_seed(0)

SPLIT = tt.CompileConfig(max_region_nodes=2)  # many regions: exercises the executor path


def mlp(activation: type[nn.Module]) -> nn.Module:
    return nn.Sequential(nn.Linear(32, 64), activation(), nn.Linear(64, 64), activation(), nn.Linear(64, 10))


class TwoBranchResidual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.left = nn.Sequential(nn.Linear(16, 16), nn.ReLU())
        self.right = nn.Sequential(nn.Linear(16, 16), nn.Tanh())
        self.out = nn.Linear(16, 16)

    def forward(self, x):
        return self.out(self.left(x) + self.right(x)) + x


class ThreeInputsAndKeyword(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, a, b, c, *, scale):
        return self.proj(a) * b - c * scale


class DictAndNestedOutputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 4)
        self.b = nn.Linear(8, 2)

    def forward(self, x):
        h = self.a(x)
        return {"hidden": h, "pair": (self.b(x), [h.sum(-1), x.mean()])}


class WithBuffer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.register_buffer("offset", torch.randn(8))

    def forward(self, x):
        return self.lin(x) + self.offset


class SharedWeight(nn.Module):
    """One Linear called at two sites, plus tied input/output embeddings."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(20, 8)
        self.shared = nn.Linear(8, 8)
        self.head = nn.Linear(8, 20, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        h = self.shared(torch.relu(self.shared(self.embed(ids))))
        return self.head(h)


class BatchNormDropout(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 4))

    def forward(self, x):
        return self.net(x)


@pytest.mark.parametrize("config", [None, SPLIT], ids=["default", "split"])
class TestParity:
    def test_linear(self, config):
        assert_parity(nn.Linear(16, 4), (torch.randn(3, 16),), config=config)

    @pytest.mark.parametrize("activation", [nn.ReLU, nn.GELU])
    def test_mlp(self, config, activation):
        assert_parity(mlp(activation), (torch.randn(5, 32),), config=config)

    def test_residual_two_branches(self, config):
        assert_parity(TwoBranchResidual(), (torch.randn(4, 16),), config=config)

    def test_three_inputs_and_a_keyword(self, config):
        args = (torch.randn(2, 8), torch.randn(2, 8), torch.randn(2, 8))
        assert_parity(ThreeInputsAndKeyword(), args, {"scale": torch.randn(2, 8)}, config=config)

    def test_dict_and_nested_outputs(self, config):
        compiled = assert_parity(DictAndNestedOutputs(), (torch.randn(3, 8),), config=config)
        out = compiled(torch.randn(3, 8))
        assert set(out) == {"hidden", "pair"}
        assert isinstance(out["pair"], tuple) and isinstance(out["pair"][1], list)

    def test_registered_buffer(self, config):
        assert_parity(WithBuffer(), (torch.randn(2, 8),), config=config)

    def test_shared_weight(self, config):
        assert_parity(SharedWeight(), (torch.randint(0, 20, (2, 5)),), config=config)

    def test_batchnorm_dropout_runs_in_eval_mode_and_restores_training(self, config):
        model = BatchNormDropout()
        model.net[1].running_mean.normal_()
        model.train()
        compiled = assert_parity(model, (torch.randn(6, 8),), config=config)
        assert model.training and model.net[1].training, "the caller's training mode must be restored"
        running_mean = model.net[1].running_mean.clone()
        compiled(torch.randn(6, 8))
        torch.testing.assert_close(model.net[1].running_mean, running_mean)

    def test_transformer_encoder_layer(self, config):
        layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True)
        assert_parity(layer, (torch.randn(2, 6, 32),), config=config)


def test_outputs_do_not_require_grad():
    model = mlp(nn.ReLU)
    compiled = tt.compile(model, example_inputs=(torch.randn(2, 32),))
    assert not compiled(torch.randn(2, 32)).requires_grad
    assert torch.is_grad_enabled(), "compiled calls must not change the caller's grad mode"


def test_tied_weights_are_bound_once():
    compiled = tt.compile(SharedWeight(), example_inputs=(torch.randint(0, 20, (2, 5)),))
    assert "1 tied" in compiled.explain()


def test_split_config_really_uses_the_executor():
    compiled = tt.compile(TwoBranchResidual(), example_inputs=(torch.randn(4, 16),), config=SPLIT)
    assert not compiled.uses_direct_path and compiled.region_count > 2
    compiled(torch.randn(4, 16))
    assert all(record.ran for record in compiled.last_report.records)

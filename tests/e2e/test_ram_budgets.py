"""RAM budgets anywhere from the smallest that compiles to well above the weights: the
planner keeps the weights in RAM where that whole plan fits and streams them where it
does not, and the smallest budget an error names is one that compiles."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tensortorrent as tt
from conftest import eager_outputs


def weight_bytes(model: nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in {id(t): t for t in model.state_dict().values()}.values())


def budgeted(budget: int, max_region_nodes: int = 1) -> tt.CompileConfig:
    return tt.CompileConfig(ram_budget_bytes=budget, max_region_nodes=max_region_nodes)


class SharedLinear(nn.Module):
    """One Linear called twice: its weight is read by two regions, so it never streams."""

    def __init__(self) -> None:
        super().__init__()
        self.shared, self.head = nn.Linear(32, 32), nn.Linear(32, 16)

    def forward(self, x):
        return self.head(torch.relu(self.shared(torch.relu(self.shared(x)))))


class Skips(nn.Module):
    """Residual blocks: each block's input lives on past its Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(48, 48) for _ in range(3))

    def forward(self, x):
        for block in self.blocks:
            x = x + torch.relu(block(x))
        return x


def mlp(dtype=torch.float32) -> nn.Module:
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16)).to(dtype)


def model_and_input(name: str) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model, dtype = {
        "fp32 mlp": (mlp(), torch.float32),
        "bf16 mlp": (mlp(torch.bfloat16), torch.bfloat16),
        "shared weights": (SharedLinear(), torch.float32),
        "skips": (Skips(), torch.float32),
        "bf16 skips": (Skips().to(torch.bfloat16), torch.bfloat16),
    }[name]
    return model.eval(), torch.randn(8, model_input_width(model), dtype=dtype)


def model_input_width(model: nn.Module) -> int:
    return next(m for m in model.modules() if isinstance(m, nn.Linear)).in_features


MODELS = ["fp32 mlp", "bf16 mlp", "shared weights", "skips", "bf16 skips"]


def smallest_budget(model, x) -> int:
    with pytest.raises(tt.MemoryCapacityError, match=r"below the smallest budget this model compiles with") as error:
        tt.compile(model, (x,), budgeted(64), devices="cpu")
    assert error.value.smallest_budget_bytes is not None
    assert f"{error.value.smallest_budget_bytes} bytes" in str(error.value)
    return error.value.smallest_budget_bytes


def assert_matches_eager(compiled, model, x) -> None:
    torch.testing.assert_close(compiled(x), eager_outputs(model, (x,)), atol=1e-2, rtol=1e-2)


def test_a_budget_between_the_weights_and_their_working_set_compiles_through_compile_and_load(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256)).eval()
    x = torch.randn(64, 256)
    weights = weight_bytes(model)
    tt.compile(model, (x,), tt.CompileConfig(max_region_nodes=2), devices="cpu").save(tmp_path / "artifact")
    for budget in (int(0.6 * weights), weights - 1, weights + 4096, 4 * weights):
        config = budgeted(budget, max_region_nodes=2)
        compiled = tt.compile(model, (x,), config, devices="cpu")
        assert_matches_eager(compiled, model, x)
        # Below the weights they must stream; just above them, the working set does not fit beside them.
        assert compiled.streams_weights == (budget < weights + 4096 + 1)
        loaded = tt.load_compiled(tmp_path / "artifact", config=config)
        assert_matches_eager(loaded, model, x)


@pytest.mark.parametrize("name", MODELS)
def test_the_smallest_budget_an_error_names_compiles_and_one_byte_less_does_not(name):
    model, x = model_and_input(name)
    smallest = smallest_budget(model, x)
    assert_matches_eager(tt.compile(model, (x,), budgeted(smallest), devices="cpu"), model, x)
    with pytest.raises(tt.MemoryCapacityError) as error:
        tt.compile(model, (x,), budgeted(smallest - 1), devices="cpu")
    assert error.value.smallest_budget_bytes == smallest


@pytest.mark.parametrize("name", MODELS)
def test_every_budget_from_the_smallest_to_four_times_the_weights_compiles_and_matches_eager(name):
    model, x = model_and_input(name)
    smallest, weights = smallest_budget(model, x), weight_bytes(model)
    # The band where plans change: around the smallest, the weights and the weights with their working set.
    budgets = {smallest, smallest + 1, weights - 1, weights, weights + 1, 2 * weights, 4 * weights}
    budgets |= {smallest + (4 * weights - smallest) * step // 8 for step in range(8)}
    for budget in sorted(b for b in budgets if b >= smallest):
        assert_matches_eager(tt.compile(model, (x,), budgeted(budget), devices="cpu"), model, x)

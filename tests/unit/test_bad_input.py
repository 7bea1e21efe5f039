"""Bad input gets a clear TensorTorrentError naming expected and given, and nothing breaks."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tensortorrent as tt

torch.manual_seed(0)


class TwoInputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x, y, *, bias):
        return self.lin(x) + y + bias


@pytest.fixture(params=[None, tt.CompileConfig(max_region_nodes=1)], ids=["direct", "executor"])
def compiled(request):
    model = TwoInputs()
    args = (torch.randn(3, 8), torch.randn(3, 4))
    return model, tt.compile(model, example_inputs=args, example_kwargs={"bias": torch.randn(4)}, config=request.param)


def good_call(model, compiled):
    x, y, bias = torch.randn(3, 8), torch.randn(3, 4), torch.randn(4)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, y, bias=bias), model(x, y, bias=bias))


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        (
            (torch.randn(5, 8), torch.randn(3, 4)),
            {"bias": torch.randn(4)},
            r"args\[0\]: compiled for shape \(3, 8\), got \(5, 8\)",
        ),
        (
            (torch.randn(3, 8, dtype=torch.float64), torch.randn(3, 4)),
            {"bias": torch.randn(4)},
            "compiled for dtype torch.float32, got torch.float64",
        ),
        (
            (torch.randn(3, 8),),
            {"bias": torch.randn(4)},
            r"compiled for inputs structured as \(\*, \*, bias=\*\), got \(\*, bias=\*\)",
        ),
        (
            (torch.randn(3, 8), (torch.randn(3, 4),)),
            {"bias": torch.randn(4)},
            r"structured as .*got \(\*, \(\*\), bias=\*\)",
        ),
        (
            (torch.randn(3, 8), torch.randn(3, 4)),
            {},
            r"2 positional input\(s\) and keyword inputs \['bias'\], got 2 positional and keyword inputs \[\]",
        ),
        ((torch.randn(3, 8), torch.randn(3, 4)), {"bias": torch.randn(4), "extra": 1}, "keyword inputs"),
        (
            (torch.randn(3, 8), 3.0),
            {"bias": torch.randn(4)},
            r"args\[1\]: compiled for a tensor of shape \(3, 4\).*got float 3.0",
        ),
    ],
    ids=["shape", "dtype", "too-few", "nested", "missing-kwarg", "extra-kwarg", "not-a-tensor"],
)
def test_mismatched_inputs_raise_and_module_still_works(compiled, args, kwargs, message):
    model, module = compiled
    with pytest.raises(tt.InputMismatchError, match=message):
        module(*args, **kwargs)
    good_call(model, module)


def test_not_a_module():
    with pytest.raises(tt.InvalidArgumentError, match="expected a torch.nn.Module, got builtins.function"):
        tt.compile(lambda x: x, example_inputs=(torch.randn(2),))


def test_example_inputs_of_the_wrong_kind():
    with pytest.raises(tt.InvalidArgumentError, match="example_inputs: expected a tuple"):
        tt.compile(nn.Linear(2, 2), example_inputs="x")


def test_config_of_the_wrong_kind():
    with pytest.raises(tt.InvalidArgumentError, match="config: expected a tt.CompileConfig, got dict"):
        tt.compile(nn.Linear(2, 2), example_inputs=(torch.randn(1, 2),), config={"max_region_nodes": 2})


def test_an_unknown_device_is_refused():
    with pytest.raises(tt.InvalidArgumentError, match="unknown device 'cuda:9'"):
        tt.compile(nn.Linear(2, 2), example_inputs=(torch.randn(1, 2),), devices="cuda:9")


class DataDependent(nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # control flow on a value: export cannot capture it
            return x * 2
        return x


def test_export_failure_carries_exports_reason():
    model = DataDependent().train()
    with pytest.raises(tt.CaptureError, match="torch.export could not capture DataDependent: .+") as caught:
        tt.compile(model, example_inputs=(torch.randn(3),))
    assert caught.value.__cause__ is not None
    assert model.training, "the caller's mode is restored after a failed capture"


class PositiveOnly(nn.Module):
    def forward(self, x):
        return x[x > 0] * 2  # export captures it, with an output shape no plan can size


def test_a_shape_that_depends_on_the_inputs_values_is_refused_at_compile():
    with pytest.raises(tt.UnsupportedError, match=r"shape \(u0,\), which depends on the input's values .*x\[x > 0\]"):
        tt.compile(PositiveOnly(), example_inputs=(torch.randn(2, 8),))


def test_mismatched_constant_input():
    class Flagged(nn.Module):
        def forward(self, x, double: bool):
            return x * 2 if double else x

    compiled = tt.compile(Flagged(), example_inputs=(torch.randn(2), True))
    with pytest.raises(tt.InputMismatchError, match=r"args\[1\]: compiled for the constant bool True, got bool False"):
        compiled(torch.randn(2), False)
    torch.testing.assert_close(compiled(torch.ones(2), True), torch.full((2,), 2.0))


def test_casting_or_moving_a_compiled_module_is_refused_and_leaves_the_model_as_it_was():
    model, x = nn.Linear(4, 4).eval(), torch.randn(2, 4)
    compiled = tt.compile(model, example_inputs=(x,))
    compiled.to("cpu").float()  # changes nothing: applied as on any module
    for change in (compiled.half, compiled.double, lambda: compiled.to("meta")):
        with pytest.raises(tt.UnsupportedFeatureError, match="from torch.float32 on cpu to .* compile it again"):
            change()
    assert model.weight.dtype == torch.float32 and model.weight.device.type == "cpu"
    torch.testing.assert_close(compiled(x), model(x).detach())


class Repeat(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, n: int):
        return self.linear(torch.ones(n, 4))


def test_a_constant_input_of_another_type_is_a_mismatch_not_the_models_error():
    compiled = tt.compile(Repeat().eval(), example_inputs=(3,))
    for value in (3.0, True):
        with pytest.raises(tt.InputMismatchError, match=f"compiled for the constant int 3, got .*{value}"):
            compiled(value)


def test_an_exported_program_must_be_in_eval_mode_and_of_static_shapes():
    model, x = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)), torch.randn(3, 4)
    with pytest.raises(tt.UnsupportedError, match=r"runs aten::dropout in training mode .*model.eval\(\)"):
        tt.compile(torch.export.export(model.train(), (x,)), (x,))
    dynamic = torch.export.export(model.eval(), (x,), dynamic_shapes=({0: torch.export.Dim("batch")},))
    with pytest.raises(tt.UnsupportedError, match="with a dynamic dimension: .* export without dynamic_shapes"):
        tt.compile(dynamic, (x,))


def test_load_state_dict_takes_the_models_own_keys_and_refuses_assign():
    model, x = nn.Linear(4, 4).eval(), torch.randn(2, 4)
    compiled = tt.compile(model, example_inputs=(x,))
    halved = {name: value * 0.5 for name, value in model.state_dict().items()}  # "weight", not "model.weight"
    compiled.load_state_dict(halved)
    torch.testing.assert_close(model.weight, halved["weight"])
    torch.testing.assert_close(compiled(x), model(x).detach())
    with pytest.raises(tt.UnsupportedFeatureError, match=r"load_state_dict\(assign=True\)"):
        compiled.load_state_dict(halved, assign=True)

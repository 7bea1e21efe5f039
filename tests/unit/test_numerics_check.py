"""The numerics check's comparison, and region kernels called with other layouts."""

from __future__ import annotations

import pytest
import torch
from torch import fx

import tensortorrent as tt
from tensortorrent.runtime.numerics_check import check_outputs, tolerances
from tensortorrent.runtime.region_backends import StrideMatched


def check(got, expected, atol=None, rtol=None):
    names = [f"output[{i}]" for i in range(len(expected))]
    return check_outputs(got, expected, names, atol, rtol, "a test")


def test_outputs_within_the_dtype_tolerances_pass_and_report_the_largest_difference():
    a = torch.ones(4)
    line = check([a + 2**-15, torch.arange(3)], [a, torch.arange(3)])
    assert line == "checked against eager PyTorch on the example inputs: largest difference 3.05e-05 (output[0])"


def test_a_difference_beyond_the_tolerances_names_the_output_index_and_values():
    expected = torch.zeros(2, 3)
    got = expected.clone()
    got[1, 2] = 0.5
    message = r"output\[0\] differs .* by up to 0\.5 \(at index \(1, 2\): 0\.5 against 0\)"
    with pytest.raises(tt.NumericsError, match=message):
        check([got], [expected])


def test_nan_in_both_is_equal_but_nan_in_one_is_a_difference():
    nan = torch.tensor([float("nan"), 1.0])
    check([nan], [nan.clone()])
    with pytest.raises(tt.NumericsError) as caught:
        check([torch.tensor([1.0, 1.0])], [nan])
    assert caught.value.max_abs_diff == float("inf")


def test_integers_must_match_exactly_and_shapes_and_dtypes_must_agree():
    with pytest.raises(tt.NumericsError, match="differs"):
        check([torch.tensor([1, 2])], [torch.tensor([1, 3])])
    with pytest.raises(tt.NumericsError, match=r"is torch.float32\[2\] where eager PyTorch gives torch.float32\[3\]"):
        check([torch.zeros(2)], [torch.zeros(3)])
    with pytest.raises(tt.NumericsError, match="is 2 where eager PyTorch gives 3"):
        check([2], [3])


def test_tolerances_default_per_dtype_and_the_config_overrides_them():
    assert tolerances(torch.float32, None, None) == (1e-4, 1e-3)
    assert tolerances(torch.bfloat16, None, None) == (1e-2, 1e-2)
    assert tolerances(torch.int64, None, None) == (0.0, 0.0)
    assert tolerances(torch.float32, 0.5, None) == (0.5, 1e-3)
    check([torch.ones(2) * 1.4], [torch.ones(2)], atol=0.5)


class Double(torch.nn.Module):
    def forward(self, x):
        return (x * 2,)


def test_a_compiled_region_takes_inputs_of_another_layout_or_size():
    module = fx.symbolic_trace(Double())
    example = torch.randn(4, 6)
    with torch.no_grad():
        forward = StrideMatched(torch._inductor.compile(module, [example]), module.forward, [example])
    transposed = torch.randn(6, 4).t()  # the compiled code checks strides: copied into its layout first
    torch.testing.assert_close(forward(transposed)[0], transposed * 2)
    smaller = torch.randn(2, 6)  # a split layer's slice: the eager graph runs it
    torch.testing.assert_close(forward(smaller)[0], smaller * 2)

"""InputSignature.stand_in: inputs of the compiled shapes for timing regions where an
artifact holds no example inputs."""

from __future__ import annotations

import torch

from tensortorrent.capture import InputSignature


def test_stand_ins_have_the_compiled_shapes_dtypes_and_constants():
    example = (torch.randn(2, 3), torch.arange(4)), {"flag": True, "mask": torch.ones(2, dtype=torch.bool)}
    signature = InputSignature.from_json(InputSignature(*example).to_json())  # as an artifact holds it
    args, kwargs = signature.stand_in()
    flat = signature.flatten(args, kwargs)  # accepted as a call's inputs
    assert [(t.shape, t.dtype) for t in (args[0], args[1], kwargs["mask"])] == [
        (torch.Size([2, 3]), torch.float32),
        (torch.Size([4]), torch.int64),
        (torch.Size([2]), torch.bool),
    ]
    assert kwargs["flag"] is True and len(flat) == 4
    assert not args[1].any() and not kwargs["mask"].any()  # integer stand-ins index anything
    assert args[0].std() > 0


def test_stand_ins_leave_the_callers_random_state_alone():
    signature = InputSignature((torch.randn(8, 8, dtype=torch.bfloat16),), {})
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    first, _ = signature.stand_in()
    assert torch.equal(torch.rand(3), expected)
    assert torch.equal(signature.stand_in()[0][0], first[0])  # the same draws every time

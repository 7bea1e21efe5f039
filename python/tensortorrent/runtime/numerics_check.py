"""The numerics check (CompileConfig.validate_numerics): a compiled module's outputs on the
example inputs against eager PyTorch's, output by output, within atol + rtol * |eager|."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree

from ..errors import NumericsError, UnsupportedFeatureError
from .program_runner import ProgramRunner

# (atol, rtol) where the config leaves them unset: loose enough for a compiler's other
# order of summation, tight enough to catch a wrong kernel.
DEFAULT_TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-3),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (1e-2, 1e-2),
}


def tolerances(dtype: torch.dtype, atol: float | None, rtol: float | None) -> tuple[float, float]:
    """The (atol, rtol) for an output of `dtype`: the config's, else DEFAULT_TOLERANCES (0 for exact types)."""
    default_atol, default_rtol = DEFAULT_TOLERANCES.get(dtype, (0.0, 0.0))
    return (default_atol if atol is None else atol), (default_rtol if rtol is None else rtol)


def check_outputs(
    compiled: Any, eager: Any, names: Sequence[str], atol: float | None, rtol: float | None, what: str
) -> str:
    """Raises NumericsError for the first output of `compiled` that differs from `eager`'s
    beyond the tolerances; otherwise returns a line saying how close they were. `names`
    name the flat outputs (as messages say them); `what` says what ran (for the message)."""
    got, expected = pytree.tree_leaves(compiled), pytree.tree_leaves(eager)
    worst, worst_name = 0.0, ""
    for name, a, b in zip(names, got, expected):
        if not isinstance(b, torch.Tensor):
            if a != b:
                raise NumericsError(
                    f"numerics check: {name} is {a!r} where eager PyTorch gives {b!r} ({what})",
                    output=name,
                    max_abs_diff=float("inf"),
                    atol=0.0,
                    rtol=0.0,
                )
            continue
        out_atol, out_rtol = tolerances(b.dtype, atol, rtol)
        diff = _largest_difference(a, b, out_atol, out_rtol, name, what)
        if diff > worst:
            worst, worst_name = diff, name
    where = f" ({worst_name})" if worst_name else ""
    return f"checked against eager PyTorch on the example inputs: largest difference {worst:.3g}{where}"


def _largest_difference(a: torch.Tensor, b: torch.Tensor, atol: float, rtol: float, name: str, what: str) -> float:
    a, b = a.detach().cpu(), b.detach().cpu()
    if a.shape != b.shape or a.dtype != b.dtype:
        raise NumericsError(
            f"numerics check: {name} is {a.dtype}{list(a.shape)} where eager PyTorch gives "
            f"{b.dtype}{list(b.shape)} ({what})",
            output=name,
            max_abs_diff=float("inf"),
            atol=atol,
            rtol=rtol,
        )
    if b.numel() == 0:
        return 0.0
    if b.is_floating_point() or b.is_complex():
        wide = torch.complex128 if b.is_complex() else torch.float64
        a64, b64 = a.to(wide), b.to(wide)
        diff = (a64 - b64).abs()
        diff = torch.where(a64.isnan() & b64.isnan(), torch.zeros_like(diff), diff)  # NaN in both: equal
        diff = torch.where(diff.isnan(), torch.full_like(diff, float("inf")), diff)  # NaN in one: a difference
        allowed = atol + rtol * b64.abs().nan_to_num(0.0)
    else:  # integers and booleans: exact
        a64, b64 = a.to(torch.float64), b.to(torch.float64)
        diff = (a != b).to(torch.float64) * (a64 - b64).abs().clamp(min=1.0)
        allowed = torch.zeros_like(diff)
    excess = diff > allowed
    if bool(excess.any()):
        flat = int(torch.argmax((diff - allowed).flatten()))
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), b.shape)) if b.dim() else ()
        largest = float(diff.max())
        raise NumericsError(
            f"numerics check: {name} differs from eager PyTorch by up to {largest:.3g} (at index {index}: "
            f"{a64[index].item():.6g} against {b64[index].item():.6g}); tolerances atol={atol:g}, rtol={rtol:g} "
            f"({what}); loosen CompileConfig(atol=, rtol=) if this is expected, or use region_backend='eager'",
            output=name,
            max_abs_diff=largest,
            atol=atol,
            rtol=rtol,
        )
    return float(diff.max())


def check_numerics(compiled, program, args: tuple, kwargs: dict, config) -> str:
    """Runs `compiled` once on the example inputs against the captured program run op by
    op (eager PyTorch, the model's own weights); raises NumericsError beyond the
    tolerances, else returns explain()'s line. Where eager cannot run here (weights left
    on disk) or would change the model (buffer updates), says so instead, or with
    validate_numerics=True raises UnsupportedFeatureError."""
    eager_runner = ProgramRunner(program, compiled.artifact_parts().regions)
    reason = None
    if any(isinstance(v, torch.Tensor) and v.is_meta for v in eager_runner.bound_values):
        reason = "the weights are read from a checkpoint, not held in memory"
    elif eager_runner.mutations:
        reason = "the model updates its own buffers, which a second run would change"
    if reason is not None:
        if config.validate_numerics:
            raise UnsupportedFeatureError("validate_numerics=True", reason, "pass validate_numerics=False")
        return f"not checked: {reason}"
    flat = compiled.input_signature.flatten(args, kwargs)
    with torch.no_grad():
        expected = eager_runner.run_inline(flat)
        got = compiled(*args, **kwargs)
    # "output['logits']", "output[0]"; a model returning one tensor: "the output".
    names = [f"output{path}" if path else "the output" for path, _ in compiled.output_leaves()]
    what = f"region_backend={config.region_backend!r}"
    return check_outputs(got, expected, names, config.atol, config.rtol, what)

"""A mixture of experts' stacked experts with int8 weights, one scale per output channel of each expert.

transformers keeps a mixture's experts stacked, one 3-D tensor per projection ([experts,
out, in]: `gate_up_proj` and `down_proj`, or `up_proj` without a gate), not as linear
layers. Int8Experts holds each as int8 values and scales [experts, out] (what the
weights cache, artifacts and checkpoints hold) and computes as transformers' grouped
implementation does: the tokens sorted by the expert they are routed to, then one
`tensortorrent::int8_grouped_linear` per projection, which runs only the experts that
have tokens (on the CPU each through torch's weight-only int8 kernel, as int8_linear).
It reads only those experts' bytes: capture/program.py counts its tables as gathered, so
a plan under a RAM budget maps them from disk instead of reading them whole.

Only experts that compute as transformers' default does are taken (no bias, no norm
after the experts, the gate and up halves concatenated, the default gate, not split
across processes); others stay as they are. In "int4" too they are int8: torch's int4 kernel packs per expert in a
layout of its own, which a gather of the experts a token uses would have to undo.
"""

from __future__ import annotations

import torch
from torch import nn

from .int8_linear import frozen_parameter, quantize_int8, unit_scales

STACKED = ("gate_up_proj", "up_proj", "down_proj")  # transformers' names of the stacked projections


@torch.library.custom_op("tensortorrent::int8_grouped_linear", mutates_args=())
def int8_grouped_linear(
    x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor, offsets: torch.Tensor
) -> torch.Tensor:
    """Rows `x` [tokens, in] sorted by expert, expert e's rows ending at `offsets[e]`
    (cumulative counts, int32): each row times its expert's weight (int8 [experts, out,
    in] times `weight_scale` [experts, out]) transposed; rows past the last offset are 0."""
    out = x.new_zeros((x.shape[0], weight.shape[1]))
    start = 0
    for expert, end in enumerate(offsets.tolist()):  # one read of the offsets, then the hit experts
        if end == start:
            continue
        rows = x[start:end]
        if x.device.type == "cpu":
            low = torch.bfloat16  # as int8_linear: the scales applied after the kernel, in their dtype
            unscaled = torch.ops.aten._weight_int8pack_mm(rows.to(low), weight[expert], unit_scales(weight.shape[1]))
            out[start:end] = (unscaled.to(weight_scale.dtype) * weight_scale[expert]).to(x.dtype)
        else:
            out[start:end] = torch.nn.functional.linear(rows, weight[expert].to(x.dtype)) * weight_scale[expert]
        start = end
    return out


@int8_grouped_linear.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    return x.new_empty((x.shape[0], weight.shape[1]))


def stacked_experts(module: nn.Module) -> bool:
    """Whether `module` is a transformers experts module that Int8Experts computes alike."""
    gate = getattr(type(module), "_apply_gate", None)
    return (
        getattr(module, "has_gate", None) is not None
        and not getattr(module, "has_bias", True)
        and not getattr(module, "has_post_expert_norm", True)
        and getattr(module, "is_concatenated", False)
        and not getattr(module, "_is_expert_parallel", False)  # its sentinel rows are another's experts
        and getattr(gate, "__name__", None) == "_default_apply_gate"
        and all(
            isinstance(p, nn.Parameter) and p.dim() == 3 and p.is_floating_point()
            for p in (getattr(module, name, None) for name in stacked_names(module))
        )
    )


def stacked_names(module: nn.Module) -> tuple[str, str]:
    """The names of `module`'s stacked projections: in, then out."""
    return ("gate_up_proj" if module.has_gate else "up_proj", "down_proj")


def expert_rows(weight: torch.Tensor, transposed: bool) -> torch.Tensor:
    """Stacked weights as [experts, out, in]: `weight` itself, or a view of it where it is
    stored [experts, in, out] (`transposed`)."""
    return weight.transpose(1, 2) if transposed else weight


def quantize_stacked(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Stacked float weights [experts, out, in] (expert_rows) as int8 values of that shape
    and scales [experts, out]."""
    experts, out, features = rows.shape
    values, scale = quantize_int8(rows.reshape(experts * out, features))
    return values.view(experts, out, features), scale.view(experts, out)


class Int8Experts(nn.Module):
    """transformers' stacked experts (its routing, activation and expert count) computed on
    int8 tables; each projection's values under its own name, its scales under the name
    with "_scale"."""

    def __init__(self, experts: nn.Module, tables: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> None:
        super().__init__()
        self.num_experts, self.has_gate, self.act_fn = experts.num_experts, experts.has_gate, experts.act_fn
        self.names = stacked_names(experts)
        for name in self.names:
            values, scale = tables[name]
            self.register_parameter(name, frozen_parameter(values))
            self.register_parameter(f"{name}_scale", frozen_parameter(scale))

    @classmethod
    def of(cls, experts: nn.Module) -> Int8Experts:
        """The int8 twin of `experts` (stacked_experts); from meta weights, meta tables to be
        read from a checkpoint that holds them."""
        tables = {}
        for name in stacked_names(experts):
            rows = expert_rows(getattr(experts, name).detach(), experts.is_transposed)
            if rows.device.type == "meta":
                values = torch.empty(rows.shape, dtype=torch.int8, device="meta")
                tables[name] = (values, rows.new_empty(rows.shape[:2]))
            else:
                tables[name] = quantize_stacked(rows)
        return cls(experts, tables)

    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor):
        tokens, features = hidden_states.shape
        top_k = top_k_index.shape[-1]
        expert_ids, order = torch.sort(top_k_index.reshape(-1))
        rows = hidden_states[order // top_k]
        # histc, not bincount: its output's size does not depend on the values, so export keeps it.
        counts = torch.histc(expert_ids.float(), bins=self.num_experts, min=0, max=self.num_experts - 1)
        offsets = torch.cumsum(counts, dim=0, dtype=torch.int32)
        into, out = self.names
        projected = int8_grouped_linear(rows, getattr(self, into), getattr(self, f"{into}_scale"), offsets)
        if self.has_gate:
            gate, up = projected.chunk(2, dim=-1)
            projected = self.act_fn(gate) * up
        else:
            projected = self.act_fn(projected)
        projected = int8_grouped_linear(projected, getattr(self, out), getattr(self, f"{out}_scale"), offsets)
        weighted = projected * top_k_weights.reshape(-1)[order].unsqueeze(-1)
        restored = torch.empty_like(order)
        restored[order] = torch.arange(order.shape[0], device=order.device)
        summed = weighted[restored].view(tokens, top_k, features).sum(dim=1)
        return summed.to(hidden_states.dtype)

    def extra_repr(self) -> str:
        into = getattr(self, self.names[0])
        return f"num_experts={self.num_experts}, in_features={into.shape[2]}, int8 per output channel of each expert"

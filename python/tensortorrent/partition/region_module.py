"""Turns a region's nodes into a standalone fx GraphModule: its kernel's code."""

from __future__ import annotations

import copy
import hashlib

import torch
from torch import fx, nn

from ..capture.program import IN_PLACE
from .regions import Region

aten = torch.ops.aten
# A region's inputs may arrive with other strides than eager gave them (a value copied
# between tiers is contiguous), where a view of them can fail; reshape is the same view
# wherever the strides allow one, and a copy otherwise. The graph is functional, so no
# mutation can tell the difference.
STRIDE_TOLERANT = {aten.view.default: aten.reshape.default, aten._unsafe_view.default: aten.reshape.default}


def build_region_module(
    source: fx.GraphModule, region: Region, in_place: frozenset[fx.Node] = frozenset()
) -> fx.GraphModule:
    """A GraphModule taking region.in_nodes' values and returning region.out_nodes' values.

    The returned module holds no parameters of its own. It is pure (the source graph is
    functional) but for the nodes in `in_place`, which write their buffer in place
    (capture/program.py's IN_PLACE): calls of a region that writes one take turns.
    """
    graph = fx.Graph()
    values: dict[fx.Node, fx.Node] = {}
    for node in region.in_nodes:
        values[node] = graph.placeholder(node.name)
        values[node].meta = dict(node.meta)
    root = nn.Module()
    for node in region.nodes:
        if node.op == "get_attr":
            _copy_attribute(source, root, node.target)
        values[node] = graph.node_copy(node, lambda n: values[n])
        target = values[node].target
        values[node].target = IN_PLACE[target] if node in in_place else STRIDE_TOLERANT.get(target, target)
    graph.output(tuple(values[node] for node in region.out_nodes))
    module = fx.GraphModule(root, graph, class_name=f"Region{region.index}")
    return module


def structural_key(module: fx.GraphModule) -> str:
    """What a region's graph computes, whatever its values are named: each node's operation
    and the positions of its arguments, and each placeholder's shape, dtype and strides.
    Two layers of one model (transformer.h.0 and .h.1) get the same key, so a decision
    timed on one holds for the other."""
    position: dict[fx.Node, int] = {}
    lines = []
    for index, node in enumerate(module.graph.nodes):
        position[node] = index
        arguments = fx.node.map_arg((node.args, node.kwargs), lambda value: f"%{position[value]}")
        if node.op == "placeholder":
            value = node.meta.get("val")
            described = (
                f"{tuple(value.shape)}/{value.dtype}/{tuple(value.stride())}"
                if isinstance(value, torch.Tensor)
                else repr(value)
            )
            lines.append(f"placeholder {described}")
        else:
            lines.append(f"{node.op} {node.target if node.op != 'get_attr' else 'attribute'} {arguments}")
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _copy_attribute(source: nn.Module, target: nn.Module, dotted: str) -> None:
    *parents, leaf = dotted.split(".")
    src, dst = source, target
    for name in parents:
        src = getattr(src, name)
        if not hasattr(dst, name):
            dst.add_module(name, nn.Module())
        dst = getattr(dst, name)
    value = getattr(src, leaf)
    if isinstance(value, nn.Module):
        dst.add_module(leaf, value)
    else:
        setattr(dst, leaf, value)


def on_device(module: fx.GraphModule, device: torch.device) -> fx.GraphModule:
    """The region's kernel for a device: the same graph with every tensor it creates (an
    arange, a mask, a full; torch.export records them on the CPU it ran on) made on
    `device` instead, so nothing it computes there mixes devices. Its attributes (a lifted
    constant) are copied to the device too. The same module where `device` is the CPU."""
    if device.type == "cpu":
        return module
    root = copy.deepcopy(module).to(device)
    graph = root.graph
    for node in graph.nodes:
        if isinstance(node.kwargs.get("device"), (torch.device, str)):
            node.kwargs = {**node.kwargs, "device": device}
        elif node.op == "get_attr":
            *parents, leaf = node.target.split(".")
            owner = root
            for name in parents:
                owner = getattr(owner, name)
            value = getattr(owner, leaf)
            if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter):
                setattr(owner, leaf, value.to(device))  # a plain attribute: .to() above left it
    root.recompile()
    return root

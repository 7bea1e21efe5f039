"""Deterministic partition of a graph into layer-sized, straight-line regions."""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import fx, nn

from ..capture.program import BoundTensor, NormalizedProgram


@dataclass
class Region:
    """A contiguous run of graph operations that executes as one kernel call.

    in_nodes are the values it reads from outside (placeholders or earlier regions),
    out_nodes the values it produces that something outside reads; deps the indices of
    the regions producing its inputs.
    """

    index: int
    layer: str | None
    nodes: list[fx.Node]
    in_nodes: list[fx.Node] = field(default_factory=list)
    out_nodes: list[fx.Node] = field(default_factory=list)
    bound: list[BoundTensor] = field(default_factory=list)
    deps: list[int] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"r{self.index}" + (f":{self.layer}" if self.layer else "")

    @property
    def parameter_bytes(self) -> int:
        return sum(b.nbytes for b in self.bound)

    @property
    def span(self) -> str:
        """What the region holds: its layer's class, or 'first .. last' module path."""
        if self.layer is not None:
            for node in self.nodes:
                for path, module_type in (node.meta.get("nn_module_stack") or {}).values():
                    if path == self.layer:
                        # torch records the class as a dotted name (or, in some versions, the type)
                        return getattr(module_type, "__name__", str(module_type).rsplit(".", 1)[-1])
        paths = [path for path in map(_module_path, self.nodes) if path is not None]
        if not paths:
            return "-"
        first, last = paths[0] or "(root)", paths[-1] or "(root)"
        return first if first == last else f"{first} .. {last}"


def _module_path(node: fx.Node) -> str | None:
    stack = node.meta.get("nn_module_stack")
    return next(reversed(stack.values()))[0] if stack else None


def layer_paths(model: nn.Module) -> frozenset[str]:
    """Module paths that are layers: composite blocks indexed in a container (h.0, layers.3).

    Leaf modules indexed in a Sequential (an MLP's Linear layers) are not layers, so a
    small MLP stays one region while each block of a transformer becomes its own.
    """
    return frozenset(
        name
        for name, module in model.named_modules()
        if name and name.rsplit(".", 1)[-1].isdigit() and next(module.children(), None) is not None
    )


def parameter_owners(program: NormalizedProgram) -> frozenset[str]:
    """Module paths that own a bound tensor (`h.0.mlp.c_fc` for `h.0.mlp.c_fc.weight`):
    cutting regions there lets each region read one parameter group, to stream it alone."""
    return frozenset(name.rsplit(".", 1)[0] for b in program.bound for name in b.names if "." in name)


def partition(
    program: NormalizedProgram, layers: frozenset[str], max_region_nodes: int, innermost: bool = False
) -> list[Region]:
    """Cuts the program's operations, in graph order, into regions.

    A region ends where the layer changes or when it holds max_region_nodes operations.
    Regions are contiguous in topological order, so every dependency points backwards and
    the region graph is acyclic. The same graph always gives the same regions.
    """
    regions: list[Region] = []
    previous_layer: str | None = None
    for node in program.compute_nodes:
        layer = _layer_of(node, layers, previous_layer, innermost)
        current = regions[-1] if regions else None
        if current is None or current.layer != layer or len(current.nodes) >= max_region_nodes:
            current = Region(index=len(regions), layer=layer, nodes=[])
            regions.append(current)
        current.nodes.append(node)
        previous_layer = layer
    _connect(program, regions)
    return regions


def regions_from_names(program: NormalizedProgram, saved: list[tuple[str | None, list[str]]]) -> list[Region]:
    """Rebuilds regions saved as (layer, operation names), without partitioning again.

    Raises ValueError unless the saved regions cover every operation once, in graph order:
    only then do they describe this program.
    """
    operations = program.compute_nodes
    by_name = {node.name: node for node in operations}
    regions = []
    for index, (layer, names) in enumerate(saved):
        missing = [name for name in names if name not in by_name]
        if missing:
            raise ValueError(f"region {index} names operations the program does not have: {missing[:3]}")
        regions.append(Region(index=index, layer=layer, nodes=[by_name[name] for name in names]))
    if [node for region in regions for node in region.nodes] != operations:
        raise ValueError("the saved regions do not cover the program's operations once each, in graph order")
    _connect(program, regions)
    return regions


def _layer_of(node: fx.Node, layers: frozenset[str], previous: str | None, innermost: bool) -> str | None:
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return previous  # glue ops without a module (getitem, asserts) stay with their neighbours
    paths = [path for path, _ in stack.values()]
    for path in reversed(paths) if innermost else paths:
        if path in layers:
            return path
    return None


def _connect(program: NormalizedProgram, regions: list[Region]) -> None:
    """Fills each region's inputs, outputs, bound tensors and dependencies."""
    owner = {node: region.index for region in regions for node in region.nodes}
    bound_by_slot = {b.slot: b for b in program.bound}
    for region in regions:
        members = set(region.nodes)
        seen: set[fx.Node] = set()
        deps: set[int] = set()
        for node in region.nodes:
            for source in node.all_input_nodes:
                if source in members or source in seen:
                    continue
                seen.add(source)
                region.in_nodes.append(source)
                if source in owner:
                    deps.add(owner[source])
                elif program.slot_of[source] in bound_by_slot:
                    bound = bound_by_slot[program.slot_of[source]]
                    if bound not in region.bound:
                        region.bound.append(bound)
            if any(user not in members for user in node.users):
                region.out_nodes.append(node)
        region.deps = sorted(deps)

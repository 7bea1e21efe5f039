"""How the lowering runs a split layer (planning/layer_split.py): its weight and bias are
two buffers each in RAM, the device's rows and the CPU's (views of the model's tensor,
so RAM holds their bytes once); the device's rows are copied to it ahead of use like any
streamed weight; the CPU computes its rows from RAM (the input copied to RAM if it is
not there) while the device computes its own, and their result is copied to the device,
where a join instruction appends it to the device's.

A mixin of the lowering: it uses `buffer`, `emit`, `values_on`, `copy_loaded`,
`producer`, `runner`, `machine`, `compute_s`, `devices`, `names`, `preset`, and fills
`parts` (buffer -> rows of its bound tensor), `meta_of` (buffer -> dtype and shape, for
the core's views) and `joined` (the join instructions).
"""

from __future__ import annotations

from .. import core
from .layer_split import LayerSplit
from .machine import CPU_QUEUE, RAM
from .op import Op

K = core.InstructionKind
LIFE = core.BufferLifetime


class SplitLayers:
    """Split layers' buffers and instructions, for _Lowering in lowering.py."""

    def init_splits(self, splits: dict[int, LayerSplit]) -> None:
        self.splits = splits
        self.parts: dict[int, tuple[int, int]] = {}
        self.meta_of: dict[int, tuple] = {}
        self.joined: set[int] = set()
        self.device_parts: dict[int, dict[int, int]] = {}  # region -> slot -> its device rows in RAM
        self.cpu_parts: dict[int, dict[int, int]] = {}  # region -> slot -> its CPU rows in RAM
        self.split_slots = {
            slot: region
            for region, split in splits.items()
            for slot in (split.layer.weight, split.layer.bias)
            if slot is not None
        }

    def split_in_ram(self, slot: int) -> bool:
        """Weight `slot` of a split layer as two resident buffers of rows in RAM; False for other weights."""
        region = self.split_slots.get(slot)
        if region is None:
            return False
        dtype, shape = self.runner.slot_meta[slot]
        rows = self.splits[region].device_rows
        row_bytes = self.size(slot) // shape[0]
        for parts, (start, stop) in ((self.device_parts, (0, rows)), (self.cpu_parts, (rows, shape[0]))):
            label = f"weight {slot} rows {start}:{stop}"
            part = self.buffer(RAM, None, LIFE.Resident, label, nbytes=(stop - start) * row_bytes, torch_owned=True)
            parts.setdefault(region, {})[slot] = part
            self.parts[part] = (start, stop)
            self.meta_of[part] = (dtype, (stop - start, *shape[1:]))
            self.preset.append((part, slot))
        return True

    def copy_device_rows(self, region: int, deps: set[int]) -> dict[int, int]:
        """The device's rows of a split layer's weights copied to its device (one Copy)."""
        return self.copy_loaded(region, self.device_parts[region], deps)

    def cpu_rows(self, region: int) -> int:
        """The CPU's rows computed from RAM, their result copied to the region's device: that copy."""
        kernel, split = self.runner.kernels[region], self.splits[region]
        tier = self.tier_of(region)
        cpu_parts = self.cpu_parts[region]
        activations = [s for s in kernel.in_slots if s not in cpu_parts]
        in_ram = self.values_on(activations, RAM)
        inputs = [cpu_parts.get(slot, in_ram.get(slot)) for slot in kernel.in_slots]
        features = split.layer.rows - split.device_rows
        name = self.names[region]
        output = self.rows_out(region, RAM, features, f"{name} cpu rows out")
        seconds = float(self.compute_s[region][self.machine.cpu_index]) * (1.0 - split.device_share)
        deps = {self.producer[b] for b in inputs if b in self.producer}
        compute = self.emit(Op(K.Compute, CPU_QUEUE, inputs, [output], deps, f"{name} cpu rows", seconds))
        self.ops[compute].region = region
        self.region_of[compute] = region
        self.operands[compute] = (tuple(inputs), (output,))
        on = self.machine.tier_names[tier]
        target = self.rows_out(region, tier, features, f"{name} cpu rows on {on}")
        link_s = self.machine.to_device_seconds(tier, self.buffers[output]["bytes"])
        label = f"{name} cpu rows -> {on}"
        queue = self.machine.link_queue(RAM, tier)
        self.emit(
            Op(K.Copy, queue, [output], [target], {compute}, label, link_s, self.declared(tier, link_s)), serial=True
        )
        return target

    def rows_out(self, region: int, tier: int, features: int, label: str) -> int:
        """A buffer for `features` of a split layer's output features on `tier`."""
        (out_slot,) = self.runner.kernels[region].out_slots
        dtype, shape = self.runner.slot_meta[out_slot]
        nbytes = self.size(out_slot) * features // self.splits[region].layer.rows
        buffer = self.buffer(tier, None, LIFE.Transient, label, nbytes=nbytes)
        self.meta_of[buffer] = (dtype, (*shape[:-1], features))
        return buffer

    def device_rows_out(self, region: int) -> int:
        return self.rows_out(
            region, self.tier_of(region), self.splits[region].device_rows, f"{self.names[region]} own rows out"
        )

    def join(self, region: int, own: int, cpu: int, outputs: list[int]) -> None:
        """The instruction on the device that appends the CPU's features to its own."""
        deps = {self.producer[own], self.producer[cpu]}
        op = Op(K.Compute, self.compute_queue(region), [own, cpu], outputs, deps, f"{self.names[region]} join", 0.0)
        op.region = region
        ident = self.emit(op, serial=True)
        self.region_of[ident] = region
        self.operands[ident] = ((own, cpu), tuple(outputs))
        self.joined.add(ident)

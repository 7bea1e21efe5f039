"""Where a build runs: the `devices`, `machine` and budgets that tt.compile and
tt.load_compiled take, resolved once into a Target.

The `devices` argument is read here only: checked and made a list of names, the
accelerators it may mean discovered and measured (probing one creates its CUDA context,
so only when a name may mean one), the virtual devices it names matched to their
declarations, and the budgets of every tier resolved."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .config import CompileConfig
from .errors import InvalidArgumentError
from .hardware import discover_devices, hold_torch_threads, resolve_budgets
from .hardware.accelerator import named_accelerators
from .hardware.budgets import Budgets
from .hardware.devices import names_accelerator
from .hardware.virtual import VirtualDevice, check_machine
from .planning.machine import PlanMachine, resolve_machine
from .planning.streaming import UNBOUNDED

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Target:
    """The budgets, and the devices a plan may use with their memory, links and speeds."""

    budgets: Budgets
    machine: PlanMachine  # host RAM at its budget
    missing: tuple[str, ...] = ()  # devices asked for that this machine lacks, left out (a load's default)

    def streamed(self) -> PlanMachine:
        """The machine for a placement whose weights stream from disk: the streamed program,
        not the placement, holds RAM to its budget."""
        return replace(self.machine, ram_bytes=UNBOUNDED)

    def note(self) -> str:
        """What explain() adds to where the plan came from: the devices left out."""
        return f" (compiled for {', '.join(self.missing)} too, which this machine lacks)" if self.missing else ""


def requested_devices(devices: object, caller: str) -> list[str]:
    """`devices` as a list of device names: "auto", "cpu", a declared virtual device's or
    an accelerator's name ("cuda:0"), or a non-empty list of them."""
    requested = [devices] if isinstance(devices, str) else devices
    if not isinstance(requested, (list, tuple)) or not requested or not all(isinstance(d, str) for d in requested):
        raise InvalidArgumentError(
            f"{caller}: devices: expected 'auto', 'cpu', a declared virtual device's name or a "
            f"non-empty list of them, got {devices!r}"
        )
    return list(requested)


def resolve_target(
    devices: object,
    machine: VirtualDevice | Sequence[VirtualDevice] | None,
    config: CompileConfig,
    caller: str = "tt.compile",
    *,
    here_only: bool = False,
) -> Target:
    """The Target of `devices` (see requested_devices) and the virtual devices `machine`
    declares, under `config`'s budgets; the torch threads held to the CPU budget. With
    `here_only` (a loaded artifact's devices by default), the devices this machine lacks
    are left out and named in Target.missing rather than refused."""
    declared = check_machine(machine, caller)
    requested = requested_devices(devices, caller)
    budgets = resolve_budgets(config, devices=discover_devices(accelerators=names_accelerator(requested)))
    accelerators = named_accelerators(requested, budgets)
    missing: tuple[str, ...] = ()
    if here_only:
        known = ("cpu", *(device.name for device in declared), *accelerators)
        missing = tuple(name for name in requested if name not in known)
        requested = [name for name in requested if name not in missing] or ["cpu"]
        if missing:
            log.warning("the artifact was compiled for %s, not on this machine: planning without", ", ".join(missing))
    hold_torch_threads(budgets.cpus)
    plan_machine = resolve_machine(requested, declared, budgets.ram.amount, accelerators, caller)
    plan_machine.check_activation_budget(config.activation_budget_bytes, caller)
    return Target(budgets, plan_machine, missing)

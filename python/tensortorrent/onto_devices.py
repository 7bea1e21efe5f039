"""An artifact loaded onto devices: the devices it may compute on here (by default those it
was compiled for), and its program planned onto them as tt.compile plans a model."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .artifact.devices import saved_devices
from .artifact.layout import MANIFEST
from .build import Build
from .capture import InputSignature
from .config import CompileConfig
from .errors import ArtifactError
from .from_checkpoint import StreamedSource, streamed_module
from .hardware import discover_devices, resolve_budgets
from .hardware.accelerator import named_accelerators
from .hardware.budgets import Budgets
from .hardware.devices import names_accelerator
from .hardware.virtual import VirtualDevice, check_machine
from .observe.progress import CompileProgress
from .planning.fit import check_fits, weight_bytes
from .planning.machine import PlanMachine, resolve_machine
from .planning.streaming import UNBOUNDED
from .planning.weights_on_disk import WeightsOnDisk
from .runtime import CompiledModule

log = logging.getLogger(__name__)

CALLER = "tt.load_compiled"
STAGES = ["partition", "compile regions", "profile", "plan", "build"]
STREAMED_STAGES = ["partition", "compile regions", "plan", "stream"]


@dataclass(frozen=True)
class DevicesHere:
    """Where a loaded artifact's regions may compute, with this machine's budgets."""

    machine: PlanMachine
    budgets: Budgets
    missing: tuple[str, ...]  # devices it was compiled for that this machine lacks, left out

    def note(self) -> str:
        """What explain() adds to where the plan came from: the devices left out."""
        return f" (compiled for {', '.join(self.missing)} too, which this machine lacks)" if self.missing else ""


def devices_here(
    manifest: dict[str, Any],
    devices: str | list[str] | None,
    machine: VirtualDevice | Sequence[VirtualDevice] | None,
    config: CompileConfig,
) -> DevicesHere:
    """The devices load_compiled plans for: those named (as tt.compile's `devices`), or by
    default those the artifact was compiled for that are here. Virtual devices are declared
    again from the manifest; `machine` adds declarations or replaces them by name."""
    saved = saved_devices(manifest)
    declared = {device.name: device for device in check_machine(machine, CALLER)}
    for name, virtual in saved:
        if virtual is not None:
            declared.setdefault(name, virtual)
    requested = [name for name, _ in saved] if devices is None else devices
    budgets = resolve_budgets(config, devices=discover_devices(accelerators=names_accelerator(requested)))
    accelerators = named_accelerators(requested, budgets)
    missing: tuple[str, ...] = ()
    if devices is None:
        missing = tuple(name for name in requested if name not in ("cpu", *declared, *accelerators))
        requested = [name for name in requested if name not in missing] or ["cpu"]
        if missing:
            log.warning("the artifact was compiled for %s, not on this machine: planning without", ", ".join(missing))
    # Under a RAM budget the weights stream (load.py): the streamed program, not the
    # placement, holds RAM to the budget, as in tt.compile.
    ram = UNBOUNDED if config.ram_budget_bytes is not None else budgets.ram.amount
    plan_machine = resolve_machine(requested, tuple(declared.values()), ram, accelerators, CALLER)
    plan_machine.check_activation_budget(config.activation_budget_bytes, CALLER)
    return DevicesHere(plan_machine, budgets, missing)


def saved_layers(manifest: dict[str, Any]) -> frozenset[str]:
    """The layers the saved regions were cut at: where partitioning cuts again."""
    try:
        return frozenset(region["layer"] for region in manifest["regions"] if region["layer"])
    except (KeyError, TypeError) as error:
        raise ArtifactError(f"{MANIFEST}: unreadable regions ({error!r})") from error


def onto_devices(
    manifest: dict[str, Any],
    directory: str,
    model,
    program,
    signature: InputSignature,
    config: CompileConfig,
    here: DevicesHere,
    weights: WeightsOnDisk | None = None,
    verify: bool = False,
) -> CompiledModule:
    """The loaded program (its weights bound in `model`, or left on disk where `weights`
    says, under a RAM budget) partitioned, compiled, profiled and planned for `here`'s
    devices. Its regions are timed on inputs of the compiled shapes (signature.stand_in()):
    an artifact holds no example inputs. `verify`: check the weights file's chunk digests."""
    origin = f"loaded from {directory}: planned for {', '.join(d.name for d in here.machine.devices)}{here.note()}"
    if weights is not None:
        # As a checkpoint's program: placed first, each accelerator timing one region at a
        # time with that region's weights read for it alone, then streamed where it says.
        source = StreamedSource(model, manifest["model_name"], program, signature, weights, verify=verify)
        flat = signature.flatten(*signature.stand_in())
        with CompileProgress(STREAMED_STAGES) as progress:
            return streamed_module(
                source, saved_layers(manifest), here.machine, flat, config, here.budgets, progress, origin
            )
    check_fits(weight_bytes(model), here.budgets)
    args, kwargs = signature.stand_in()
    build = Build(
        model,
        manifest["model_name"],
        args,
        kwargs,
        config,
        here.budgets,
        here.machine,
        layers=saved_layers(manifest),
        model_forward=False,
        origin=origin,
    )
    with CompileProgress(STAGES) as progress:
        compiled, _ = build.compiled(program, progress.stage, progress=progress)
    return compiled

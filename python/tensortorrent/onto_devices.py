"""An artifact loaded onto devices: the devices it may compute on here (by default those it
was compiled for), and its program planned onto them as tt.compile plans a model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .artifact.devices import saved_devices
from .artifact.layout import MANIFEST
from .build import Build
from .capture import InputSignature
from .config import CompileConfig
from .errors import ArtifactError
from .from_checkpoint import StreamedSource, streamed_module
from .hardware.virtual import VirtualDevice, check_machine
from .observe.progress import CompileProgress
from .planning.fit import check_fits, weight_bytes
from .planning.weights_on_disk import WeightsOnDisk
from .runtime import CompiledModule
from .target import Target, resolve_target

CALLER = "tt.load_compiled"
STAGES = ["partition", "compile regions", "profile", "plan", "build"]
STREAMED_STAGES = ["partition", "compile regions", "plan", "stream"]


def target_here(
    manifest: dict[str, Any],
    devices: str | list[str] | None,
    machine: VirtualDevice | Sequence[VirtualDevice] | None,
    config: CompileConfig,
) -> Target:
    """The devices load_compiled plans for: those named (as tt.compile's `devices`), or by
    default those the artifact was compiled for that are here. Virtual devices are declared
    again from the manifest; `machine` adds declarations or replaces them by name."""
    saved = saved_devices(manifest)
    declared = {device.name: device for device in check_machine(machine, CALLER)}
    for name, virtual in saved:
        if virtual is not None:
            declared.setdefault(name, virtual)
    requested = [name for name, _ in saved] if devices is None else devices
    return resolve_target(requested, tuple(declared.values()), config, CALLER, here_only=devices is None)


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
    target: Target,
    weights: WeightsOnDisk | None = None,
    verify: bool = False,
) -> CompiledModule:
    """The loaded program (its weights bound in `model`, or left on disk where `weights`
    says, under a RAM budget) partitioned, compiled, profiled and planned for `target`'s
    devices. Its regions are timed on inputs of the compiled shapes (signature.stand_in()):
    an artifact holds no example inputs. `verify`: check the weights file's chunk digests."""
    planned_for = ", ".join(device.name for device in target.machine.devices)
    origin = f"loaded from {directory}: planned for {planned_for}{target.note()}"
    if weights is not None:
        # As a checkpoint's program: placed first, each accelerator timing one region at a
        # time with that region's weights read for it alone, then streamed where it says.
        source = StreamedSource(model, manifest["model_name"], program, signature, weights, verify=verify)
        flat = signature.flatten(*signature.stand_in())
        with CompileProgress(STREAMED_STAGES) as progress:
            return streamed_module(source, saved_layers(manifest), target, flat, config, progress, origin)
    check_fits(weight_bytes(model), target.budgets)
    args, kwargs = signature.stand_in()
    build = Build(
        model,
        manifest["model_name"],
        args,
        kwargs,
        config,
        target,
        layers=saved_layers(manifest),
        model_forward=False,
        origin=origin,
    )
    with CompileProgress(STAGES) as progress:
        compiled, _ = build.compiled(program, progress.stage, progress=progress)
    return compiled

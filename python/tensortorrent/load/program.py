"""One program of an artifact loaded: its weights bound to the saved graph, then its saved
plan replayed or the program planned again, on the one build path."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from ..artifact.compressed_entry import saved_accuracy
from ..artifact.devices import saved_devices
from ..artifact.layout import MANIFEST
from ..artifact.program_archive import load_program as load_program_archive
from ..build import STAGES, Saved, build, compiled_module
from ..capture import InputSignature, normalize
from ..capture.export import drop_dead_nodes, with_tensors
from ..config import CompileConfig
from ..errors import ArtifactError, TensorTorrentError
from ..hardware import hardware_fingerprint
from ..hardware.virtual import VirtualDevice, check_machine
from ..observe.progress import CompileProgress
from ..partition import regions_from_names
from ..planning import plan_from_json
from ..planning.fit import check_fits, weight_bytes
from ..runtime import CompiledModule
from ..runtime.region_backends import RegionChoice
from ..source import Source
from ..target import Target, resolve_target
from .files import ArtifactFiles
from .weights import ArtifactWeights

CALLER = "tt.load_compiled"


def load_program(
    files: ArtifactFiles,
    manifest: dict[str, Any],
    config: CompileConfig | None,
    target: Target,
    weights: ArtifactWeights,
    where: str | None = None,
    shared: dict[str, torch.Tensor] | None = None,
) -> CompiledModule:
    """The program that `manifest` (checked) describes, its weights bound from `weights`.
    A CPU plan on the machine it was planned for (same hardware fingerprint), with the
    same config, replays the saved regions, plan and schedule as they are; otherwise the
    program is partitioned and planned again for `target`, and explain() says so.
    `where` names the program in explain() (default: the artifact directory); `shared`:
    weights by name that other programs hold in RAM too (Source.sharing)."""
    where = where or files.directory
    saved_config, signature = saved_parts(manifest)
    config = config or saved_config
    program_name = manifest["files"]["program"]
    meta_program = load_program_archive(files.read(program_name), program_name)
    model, state, constants = _bind_weights(manifest["weights"], weights.tensors, meta_program)
    exported = with_tensors(meta_program, state_dict=state, constants=constants)
    drop_dead_nodes(exported.graph_module)
    program = normalize(exported)
    on_disk = weights.on_disk(files, manifest["weights"], program)  # where the weights stay on disk
    if on_disk is None:
        check_fits(weight_bytes(model), target.budgets)
    if target.machine.is_cpu_only:
        saved, origin = _saved_plan(manifest, program, config == saved_config, where)
    else:
        planned_for = ", ".join(device.name for device in target.machine.devices)
        saved, origin = None, f"loaded from {where}: planned for {planned_for}"
    args, kwargs = signature.stand_in()  # an artifact holds no example inputs
    source = Source(
        model,
        manifest["model_name"],
        program,
        signature,
        args,
        kwargs,
        stand_in_inputs=True,
        layers=saved_layers(manifest),
        on_disk=on_disk,
        values_in_ram=on_disk is None,
        verify=on_disk is not None and weights.verify(files),
        origin=origin + target.note(),
    ).sharing(shared)
    accuracy = saved_accuracy(manifest, MANIFEST)
    with CompileProgress(STAGES) as progress:
        compiled = compiled_module(source, config, build(source, target, config, saved=saved, progress=progress))
    compiled.accuracy_note = accuracy
    return compiled


def _saved_backends(manifest: dict, region_count: int) -> list[RegionChoice] | None:
    """What each region ran when the artifact was compiled (None where it did not record it,
    as artifacts before region backends did not): the regions to compile again."""
    saved = manifest.get("region_backends")
    if saved is None:
        return None
    try:
        choices = [RegionChoice.from_json(choice) for choice in saved]
    except (AttributeError, TypeError, ValueError) as error:
        raise ArtifactError(f"{MANIFEST}: unreadable region_backends ({error})") from error
    if len(choices) != region_count:
        raise ArtifactError(f"{MANIFEST}: {len(choices)} region_backends entries for {region_count} regions")
    return choices


def _saved_cpu_seconds(manifest: dict, region_count: int) -> list[float] | None:
    """The CPU times measured when the artifact was compiled, if it recorded them all."""
    saved = (manifest["predicted_costs"] or {}).get("regions", [])
    seconds = [cost.get("cpu_seconds") if isinstance(cost, dict) else None for cost in saved]
    valid = len(seconds) == region_count and all(isinstance(s, (int, float)) for s in seconds)
    return [float(s) for s in seconds] if valid else None


def _bind_weights(entries: list, tensors: dict[str, torch.Tensor], meta: torch.export.ExportedProgram):
    """The weights as a module tree under their original names, and the program's tables.

    Tied names get the same Parameter object, so they stay tied (and bound once).
    """
    model = nn.Module()
    state: dict[str, torch.Tensor] = {}
    constants: dict[str, torch.Tensor] = {}
    try:
        for entry in entries:
            tensor = tensors[entry["key"]]
            value = (
                nn.Parameter(tensor, requires_grad=bool(entry["requires_grad"]))
                if entry["kind"] == "parameter"
                else tensor
            )
            for name in entry["names"]:
                _place(model, name, value, entry["kind"], persistent=name in meta.state_dict)
                (state if name in meta.state_dict else constants)[name] = value
    except KeyError as error:
        raise ArtifactError(f"{MANIFEST}: weights table names {error} which the weights file lacks") from error
    except (TypeError, AttributeError) as error:
        raise ArtifactError(f"{MANIFEST}: malformed weights table ({error})") from error
    expected = set(meta.state_dict) | set(meta.constants)
    if set(state) | set(constants) != expected:
        missing = sorted(expected - set(state) - set(constants))
        raise ArtifactError(f"{MANIFEST}: weights table does not match the program (missing {missing[:3]})")
    for name, value in list(state.items()) + list(constants.items()):
        placeholder = meta.state_dict.get(name, meta.constants.get(name))
        if tuple(value.shape) != tuple(placeholder.shape) or value.dtype != placeholder.dtype:
            raise ArtifactError(
                f"{name}: weights file holds {tuple(value.shape)} {value.dtype}, "
                f"the program expects {tuple(placeholder.shape)} {placeholder.dtype}"
            )
    return model, state, constants


def _place(root: nn.Module, dotted: str, value: torch.Tensor, kind: str, persistent: bool) -> None:
    *parents, leaf = dotted.split(".")
    module = root
    for name in parents:
        if not hasattr(module, name):
            module.add_module(name, nn.Module())
        module = getattr(module, name)
    if kind == "parameter":
        module.register_parameter(leaf, value)
    elif kind == "buffer":
        module.register_buffer(leaf, value, persistent=persistent)
    else:
        setattr(module, leaf, value)


def saved_parts(manifest: dict) -> tuple[CompileConfig, InputSignature]:
    try:
        return CompileConfig(**manifest["config"]), InputSignature.from_json(manifest["signature"])
    except (TensorTorrentError, KeyError, TypeError, ValueError) as error:
        raise ArtifactError(f"{MANIFEST}: unreadable config or input signature ({error})") from error


def replay_decision(manifest: dict, same_config: bool) -> tuple[bool, str]:
    """Whether loading replays the saved plan here (a CPU plan, same hardware fingerprint,
    same config), and why or why not."""
    saved, here = manifest["hardware_fingerprint"].get("digest"), hardware_fingerprint()["digest"]
    on_devices = [name for name, _ in saved_devices(manifest) if name != "cpu"]
    if on_devices:
        return False, f"the saved plan placed regions on {', '.join(on_devices)}"
    if saved != here:
        return False, f"saved on hardware fingerprint {saved}, this machine is {here}"
    if not same_config:
        return False, "a different CompileConfig was given"
    return True, f"hardware fingerprint {here}"


def _saved_plan(manifest: dict, program, same_config: bool, directory: str) -> tuple[Saved | None, str]:
    """The saved CPU plan where loading replays it here (replay_decision), and explain()'s
    line on where the plan came from."""
    replay, reason = replay_decision(manifest, same_config)
    if not replay:
        return None, f"loaded from {directory}: re-planned ({reason})"
    try:
        saved_regions = [(r["layer"], list(r["operations"])) for r in manifest["regions"]]
        regions = regions_from_names(program, saved_regions)
        plan = plan_from_json(manifest["plan"], manifest["schedule"])
        if len(plan.devices) != len(regions):
            raise ValueError(f"{len(plan.devices)} device entries for {len(regions)} regions")
    except (KeyError, TypeError, ValueError, TensorTorrentError) as error:
        raise ArtifactError(f"{MANIFEST}: unreadable regions, plan or schedule ({error})") from error
    saved = Saved(regions, plan, _saved_backends(manifest, len(regions)), _saved_cpu_seconds(manifest, len(regions)))
    return saved, f"loaded from {directory}: saved plan replayed ({reason})"


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

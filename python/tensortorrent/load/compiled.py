"""tt.load_compiled(dir): verify, open safely, then build what the artifact holds: one
compiled program, or a generative module's programs (generation.py)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..artifact.layout import GENERATION_FORMAT, MANIFEST, check_manifest
from ..config import CompileConfig
from ..errors import ArtifactError, InvalidArgumentError, UnsupportedFeatureError
from ..generation.module import GenerativeModule
from ..hardware.virtual import VirtualDevice
from ..runtime import CompiledModule
from .files import ArtifactFiles, json_value
from .generation import load_generation
from .program import load_program, saved_parts, target_here
from .weights import ArtifactWeights


def load_compiled(
    path: str | os.PathLike,
    config: CompileConfig | None = None,
    verify_integrity: bool = True,
    *,
    devices: str | list[str] | None = None,
    machine: VirtualDevice | Sequence[VirtualDevice] | None = None,
) -> CompiledModule | GenerativeModule:
    """Loads an artifact written by CompiledModule.save (a CompiledModule) or by
    GenerativeModule.save (a GenerativeModule).

    `devices` names where regions may compute, as tt.compile's does; by default, the
    devices the artifact was compiled for that this machine has (its virtual devices
    declared again from the manifest; `machine` declares others, or replaces them).
    A CPU plan on the machine it was planned for (same hardware fingerprint), with the same
    config, replays the saved regions, plan and schedule as they are; otherwise the program
    is partitioned and planned again for these devices (a plan with devices is timed on
    inputs of the compiled shapes), and explain() says so. Nothing is unpickled: weights
    come from safetensors, and the program archive is opened only after its digest and
    contents are checked. A RAM budget given (`config.ram_budget_bytes`) is a budget kept:
    the weights stay on disk and stream through the core.
    """
    directory = check_load_arguments(path, config, verify_integrity)
    try:
        return _load(directory, config, verify_integrity, devices, machine)
    except ArtifactError as error:
        if directory in str(error):
            raise
        # The readers name the artifact's files alone: say which artifact.
        raise type(error)(f"artifact {directory}: {error}") from error


def _load(directory: str, config, verify_integrity: bool, devices, machine) -> CompiledModule | GenerativeModule:
    files = ArtifactFiles.open(directory, verify_integrity)
    manifest = files.read_json(MANIFEST)
    if isinstance(manifest, dict) and manifest.get("format") == GENERATION_FORMAT:
        return load_generation(files, manifest, config, devices, machine)
    manifest = check_manifest(manifest)
    effective = config or saved_parts(manifest)[0]
    target = target_here(manifest, devices, machine, effective)
    weights = ArtifactWeights.read(files, manifest, streaming=effective.ram_budget_bytes is not None)
    return load_program(files, manifest, config, target, weights)


def check_load_arguments(path: object, config: object, verify_integrity: object) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgumentError(f"load_compiled: path: expected a str or os.PathLike, got {type(path).__name__}")
    if config is not None and not isinstance(config, CompileConfig):
        raise InvalidArgumentError(f"load_compiled: config: expected a tt.CompileConfig, got {type(config).__name__}")
    if config is not None and config.validate_numerics:
        raise UnsupportedFeatureError(
            "validate_numerics=True",
            "tt.load_compiled (an artifact holds no model code to run eagerly)",
            "check the numerics at tt.compile, or pass validate_numerics=False",
        )
    if not isinstance(verify_integrity, bool):
        raise InvalidArgumentError(
            f"load_compiled: verify_integrity: expected a bool, got {type(verify_integrity).__name__}"
        )
    directory = os.path.abspath(os.fspath(path))
    if not os.path.isdir(directory):
        raise ArtifactError(f"{directory}: no artifact directory there")
    return directory


def parse_manifest(raw: memoryview) -> dict[str, Any]:
    """A program artifact's manifest, checked."""
    return check_manifest(json_value(raw, MANIFEST))

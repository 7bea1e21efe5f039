"""A generative module's artifact loaded (artifact/save_generation.py): the weights file
read once and every program bound to the same tensors, the KV cache made once, zeros."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from ..artifact.layout import GENERATION_FORMAT_VERSION, MANIFEST, check_file_name, check_manifest
from ..artifact.save_generation import DECODE, program_name
from ..config import CompileConfig
from ..errors import ArtifactError, UnsupportedFeatureError
from ..generation.module import GenerativeModule
from ..generation.shared_residents import build_sharing_residents
from ..generation.spec import GenerationSpec
from ..hardware.virtual import VirtualDevice
from ..runtime import CompiledModule
from ..storage.safetensors_file import SAFETENSORS_DTYPES
from .files import ArtifactFiles
from .program import load_program, saved_parts, target_here
from .weights import ArtifactWeights


def load_generation(
    files: ArtifactFiles,
    manifest: dict[str, Any],
    config: CompileConfig | None,
    devices: str | list[str] | None,
    machine: VirtualDevice | Sequence[VirtualDevice] | None,
) -> GenerativeModule:
    """The GenerativeModule of a generative artifact, its manifest read already; the
    arguments are tt.load_compiled's, for every program (a RAM budget for them all)."""
    spec, listed, cache = _checked(manifest)
    programs = {length: check_manifest(files.read_json(name), name) for length, name in listed.items()}
    decode = programs[DECODE]
    effective = config or saved_parts(decode)[0]  # every program was saved with the same config
    target = target_here(decode, devices, machine, effective)
    weights = ArtifactWeights.read(files, decode, streaming=effective.ram_budget_bytes is not None)
    # One cache for every program: the same tensors bound in each, written in place by all.
    weights.tensors.update({key: torch.zeros(shape, dtype=dtype) for key, shape, dtype in cache})

    def build(length: int, shared: dict[str, torch.Tensor] | None) -> CompiledModule:
        where = f"{files.directory} ({program_name(length)})"
        return load_program(files, programs[length], config, target, weights, where, shared)

    loaded, shared_bytes = build_sharing_residents(list(programs), build)
    spec = dataclasses.replace(spec, ram_budget_bytes=effective.ram_budget_bytes)
    tokenizer = _tokenizer(files.directory) if manifest.get("tokenizer") is True else None
    return GenerativeModule(spec, loaded, shared_bytes, tokenizer)


def _tokenizer(directory: str):
    """The tokenizer saved in the artifact (its save_pretrained files, read by transformers;
    no code of the artifact's runs)."""
    try:
        from transformers import AutoTokenizer
    except ImportError as error:
        raise UnsupportedFeatureError(
            "a tokenizer saved with a generative module", "a machine without transformers", "pip install transformers"
        ) from error
    try:
        return AutoTokenizer.from_pretrained(directory, trust_remote_code=False)
    except (OSError, ValueError) as error:
        raise ArtifactError(f"{directory}: its tokenizer cannot be read ({error})") from error


def _checked(manifest: dict[str, Any]):
    """The spec, the program manifests' names by length, and the cache buffers (key, shape,
    dtype); ArtifactError naming what is malformed."""
    version = manifest.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ArtifactError(f"{MANIFEST}: format_version: expected an int, got {version!r}")
    if version > GENERATION_FORMAT_VERSION:
        raise ArtifactError(
            f"{MANIFEST}: generative artifact format version {version} needs a newer tensortorrent "
            f"(this one reads versions up to {GENERATION_FORMAT_VERSION})"
        )
    try:
        spec = GenerationSpec.from_json(manifest["spec"])
        where = f"{MANIFEST} programs"
        listed = {int(p["length"]): check_file_name(p["manifest"], where) for p in manifest["programs"]}
        cache = [
            (c["key"], tuple(int(d) for d in c["shape"]), SAFETENSORS_DTYPES[c["dtype"]])
            for c in manifest["cache_buffers"]
        ]
    except (KeyError, TypeError, ValueError) as error:
        raise ArtifactError(f"{MANIFEST}: malformed generative manifest ({error!r})") from error
    if DECODE not in listed:
        raise ArtifactError(f"{MANIFEST}: lists no decode program (of length {DECODE})")
    return spec, listed, cache

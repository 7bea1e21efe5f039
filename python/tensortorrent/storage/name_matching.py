"""A model's parameter names matched against a checkpoint's tensors, through one common prefix.

Checkpoints and models often disagree by a wrapper: the model names `model.layers.0.w`
where the file says `layers.0.w`, or the reverse. One prefix, removed from or added to
every model name, is chosen as the one that makes the most names match; anything left
over is an error, never silently dropped or left uninitialised.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from ..errors import CheckpointError
from .checkpoint import Checkpoint, CheckpointTensor, list_names


@dataclass(frozen=True)
class Renaming:
    """How a model name becomes a checkpoint name: `prefix` (a dotted path) removed, or added
    when `add`; no change when `prefix` is empty."""

    prefix: str = ""
    add: bool = False

    def apply(self, name: str) -> str | None:
        """The checkpoint's name for model name `name`; None when a prefix to remove is absent."""
        if not self.prefix:
            return name
        if self.add:
            return f"{self.prefix}.{name}"
        head = f"{self.prefix}."
        return name[len(head) :] if name.startswith(head) else None

    def describe(self) -> str:
        if not self.prefix:
            return "names compared as they are"
        return f"names compared after {'adding' if self.add else 'removing'} the prefix '{self.prefix}.'"


def match_checkpoint(
    expected: dict[str, tuple[torch.dtype, tuple[int, ...]]],
    checkpoint: Checkpoint,
    tied: dict[str, str] | None = None,
) -> dict[str, CheckpointTensor]:
    """Each expected name (a model's state_dict key, with its dtype and shape) mapped to its
    checkpoint tensor. A name in `tied` that the checkpoint lacks takes the tensor of the
    name it is tied to. Raises CheckpointError when any name is missing, any checkpoint
    tensor is left unmatched, or any dtype or shape differs."""
    tied = tied or {}
    renaming = best_renaming(list(expected), list(checkpoint.tensors))
    matched: dict[str, CheckpointTensor] = {}
    missing: list[str] = []
    mismatched: dict[str, str] = {}  # name -> what was expected and what the file has
    used: set[str] = set()  # checkpoint names matched by some model name, fitting or not
    for name, (dtype, shape) in expected.items():
        tensor = find_tensor(name, checkpoint, renaming, tied)
        if tensor is None:
            missing.append(name)
            continue
        used.add(tensor.name)
        if (tensor.dtype, tensor.shape) == (dtype, tuple(shape)):
            matched[name] = tensor
        else:
            mismatched[name] = (
                f"{name!r}: expected {dtype} {tuple(shape)}, the file has {tensor.dtype} {tensor.shape} "
                f"({tensor.name!r} in {tensor.path})"
            )
    unexpected = [name for name in checkpoint.tensors if name not in used]
    if missing or unexpected or mismatched:
        raise CheckpointError(
            mismatch_message(checkpoint, len(expected), renaming, missing, unexpected, list(mismatched.values())),
            missing=missing,
            unexpected=unexpected,
            mismatched=list(mismatched),
        )
    return matched


def find_tensor(name: str, checkpoint: Checkpoint, renaming: Renaming, tied: dict[str, str]) -> CheckpointTensor | None:
    """The checkpoint tensor for `name`, else for the name it is tied to (checkpoints store a
    tied weight once, under one of its names)."""
    for candidate in (name, tied.get(name)):
        file_name = renaming.apply(candidate) if candidate is not None else None
        if file_name in checkpoint.tensors:
            return checkpoint.tensors[file_name]
    return None


def best_renaming(model_names: list[str], file_names: list[str]) -> Renaming:
    """The renaming that makes the most model names checkpoint names; on a tie no change,
    else the shorter prefix."""
    model_set, file_set = set(model_names), set(file_names)
    scores: Counter[Renaming] = Counter({Renaming(): len(model_set & file_set)})
    # Counting per split of each name, not per candidate prefix, keeps this linear in the names.
    for name in model_names:
        for prefix, rest in dotted_splits(name):
            if rest in file_set:
                scores[Renaming(prefix)] += 1
    for name in file_names:
        for prefix, rest in dotted_splits(name):
            if rest in model_set:
                scores[Renaming(prefix, add=True)] += 1
    return max(scores, key=lambda renaming: (scores[renaming], -len(renaming.prefix)))


def dotted_splits(name: str) -> Iterator[tuple[str, str]]:
    """Each (prefix, rest) split of `name` at a dot: "a.b.c" gives ("a", "b.c") and ("a.b", "c")."""
    for index, char in enumerate(name):
        if char == ".":
            yield name[:index], name[index + 1 :]


PER_EXPERT = re.compile(r"\.experts\.\d+\.")  # save_pretrained's layout of stacked experts


def mismatch_message(
    checkpoint: Checkpoint,
    expected_count: int,
    renaming: Renaming,
    missing: list[str],
    unexpected: list[str],
    mismatched: list[str],
) -> str:
    """One line per kind of problem, each with its count and first names."""
    lines = [
        f"checkpoint {describe_files(checkpoint.files)} does not match the model's {expected_count} tensors "
        f"({renaming.describe()}):"
    ]
    if missing:
        lines.append(f"  {len(missing)} missing from the checkpoint: {list_names(missing)}")
    if unexpected:
        lines.append(f"  {len(unexpected)} in the checkpoint but not in the model: {list_names(unexpected)}")
    if mismatched:
        lines.append(
            f"  {len(mismatched)} with another dtype or shape: {list_names(mismatched, quote=False, separator='; ')}"
        )
    if any(PER_EXPERT.search(name) for name in unexpected) and any(".experts." in name for name in missing):
        lines.append(
            "  the checkpoint stores a mixture of experts one expert per tensor, the model stacks them in one: "
            "not read in place yet; load the model with from_pretrained and compile it (its weights go to the "
            "weights cache to stream under a RAM budget)"
        )
    return "\n".join(lines)


def describe_files(files: tuple[str, ...]) -> str:
    return files[0] if len(files) == 1 else f"({len(files)} files in {os.path.commonpath(files)})"

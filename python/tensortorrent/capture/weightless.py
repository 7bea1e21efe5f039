"""Capture of a model whose weights are not in memory: built on the meta device, read later from a checkpoint.

torch.export traces with fake tensors anyway; here the weights are fake too. Each
parameter and buffer is swapped for a fake CPU tensor of its shape and dtype for the
trace (tied weights stay one tensor), then put back, so the caller's model is left as it
was. The program that comes out holds meta tensors where the saved weights go (its
state_dict: parameters and persistent buffers), as a loaded artifact's does; the caller
binds them to file ranges. What checkpoints do not save (non-persistent buffers such as
rotary inverse frequencies) gets real values: the model's own where it has them, else
those its module's init computes, rebuilt on the CPU from its config.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._pytree import tree_map

from ..errors import CaptureError, CheckpointError
from ..storage.checkpoint import Checkpoint, read_tensor
from .export import capture_model, functional_program, meta_like, with_tensors


def capture_weightless(model: nn.Module, args: tuple, kwargs: dict) -> torch.export.ExportedProgram:
    """Exports `model` at the example inputs without touching its weights' values; the
    program's state_dict holds meta tensors of the same shapes, its constants real values
    (see the module's docstring)."""
    mode = FakeTensorMode()

    def fake(value: object) -> object:
        return mode.from_tensor(value) if isinstance(value, torch.Tensor) else value

    with fake_weights(model, mode):
        exported = capture_model(model, tree_map(fake, args), tree_map(fake, kwargs))
    return weightless(exported, lambda name, value: unsaved_value(model, name, value))


def exported_weightless(
    exported: torch.export.ExportedProgram, checkpoint: Checkpoint
) -> tuple[torch.export.ExportedProgram, set[str]]:
    """A user's exported program, functionalized, its state_dict replaced by meta tensors
    (the checkpoint holds those weights); its constants keep their own values, or where
    they have none (a .pt2 file holds no tensor data), take the checkpoint's tensor of the
    same name (an artifact's weights file holds them). Returns the program and the
    checkpoint names taken as constants. The graph is re-traced over fake CPU weights:
    its own may be on the meta device."""
    mode = FakeTensorMode()
    fakes: dict[int, torch.Tensor] = {}  # id(tensor) -> its fake: tied weights stay tied

    def fake(value: torch.Tensor) -> torch.Tensor:
        if id(value) not in fakes:
            fakes[id(value)] = _fake_like(value, mode)
        return fakes[id(value)]

    constants = {name: constant_value(name, v, checkpoint) for name, v in exported.constants.items()}
    faked = with_tensors(
        exported,
        state_dict={name: fake(value) for name, value in exported.state_dict.items()},
        constants={name: fake(v) if v.is_meta else v for name, v in exported.constants.items()},
    )
    program = weightless(functional_program(faked), lambda name, value: constants.get(name, value))
    taken = {name for name, value in exported.constants.items() if isinstance(value, torch.Tensor) and value.is_meta}
    return program, taken


def _fake_like(value: torch.Tensor, mode: FakeTensorMode) -> torch.Tensor:
    with mode:
        empty = torch.empty(value.shape, dtype=value.dtype, device="cpu")
    return nn.Parameter(empty, value.requires_grad) if isinstance(value, nn.Parameter) else empty


def weightless(
    exported: torch.export.ExportedProgram, constant_value: Callable[[str, object], torch.Tensor]
) -> torch.export.ExportedProgram:
    """The same program over meta tensors for its state_dict (tied stay tied) and
    `constant_value(name, value)` for each of its constants."""
    metas: dict[int, torch.Tensor] = {}  # id(tensor) -> its meta twin

    def meta(name: str, value: object) -> torch.Tensor:
        if not isinstance(value, torch.Tensor):
            raise CaptureError(f"the exported program holds a {type(value).__name__} constant {name!r}")
        if id(value) not in metas:
            metas[id(value)] = meta_like(value)
        return metas[id(value)]

    return with_tensors(
        exported,
        state_dict={name: meta(name, value) for name, value in exported.state_dict.items()},
        constants={name: constant_value(name, value) for name, value in exported.constants.items()},
    )


def constant_value(name: str, value: object, checkpoint: Checkpoint) -> torch.Tensor:
    """An exported program's constant: its own value, else the checkpoint's tensor `name`."""
    if not isinstance(value, torch.Tensor):
        raise CaptureError(f"the exported program holds a {type(value).__name__} constant {name!r}")
    if not value.is_meta and not isinstance(value, FakeTensor):
        return value
    saved = checkpoint.tensors.get(name)
    if saved is None:
        raise CheckpointError(
            f"{name!r}: the exported program's constant (a non-persistent buffer or a tensor made in forward, "
            f"{tuple(value.shape)} {value.dtype}) has no value, and the checkpoint holds no tensor of that name: "
            "add it to the checkpoint, or pass the ExportedProgram with it on the CPU"
        )
    if (saved.dtype, saved.shape) != (value.dtype, tuple(value.shape)):
        raise CheckpointError(
            f"{name!r}: the exported program's constant is {value.dtype} {tuple(value.shape)}, the checkpoint's "
            f"tensor of that name {saved.dtype} {saved.shape} ({saved.path})"
        )
    return read_tensor(saved)


def unsaved_value(model: nn.Module, name: str, traced: object) -> torch.Tensor:
    """The real value of program constant `name` (a non-persistent buffer, or a tensor made
    in forward), which no checkpoint holds; CheckpointError when it cannot be had."""
    if not isinstance(traced, torch.Tensor):
        raise CaptureError(f"the exported program holds a {type(traced).__name__} constant {name!r}")
    constant = getattr(traced, "constant", None)  # a tensor forward made from Python numbers
    if constant is not None:
        return constant
    owner_path, _, leaf = name.rpartition(".")
    owner = _submodule(model, owner_path)
    own = owner._buffers.get(leaf) if owner is not None else None
    if own is not None and not own.is_meta:
        return own
    value = _initial_buffer(owner, leaf)
    if value is None:
        kind = f"a buffer of {type(owner).__qualname__}" if owner is not None else "a tensor made in forward"
        raise CheckpointError(
            f"{name!r} ({kind}, {tuple(traced.shape)} {traced.dtype}) is not saved in checkpoints and has no "
            "value on the meta device; a module with a `config` and no parameters (as Hugging Face's rotary "
            "embeddings) is rebuilt on the CPU to compute it, this one cannot be: build the model with this "
            "buffer on the CPU"
        )
    if tuple(value.shape) != tuple(traced.shape):
        raise CheckpointError(
            f"{name!r}: rebuilding {type(owner).__qualname__} from its config gives shape {tuple(value.shape)}, "
            f"the traced model has {tuple(traced.shape)}"
        )
    return value.to(traced.dtype)


def _submodule(model: nn.Module, path: str) -> nn.Module | None:
    try:
        return model.get_submodule(path)
    except AttributeError:
        return None


def _initial_buffer(owner: nn.Module | None, leaf: str) -> torch.Tensor | None:
    """Buffer `leaf` as `owner`'s init computes it on the CPU, for a module rebuilt from its
    `config` alone and cheap to rebuild (no parameters); None otherwise."""
    config = getattr(owner, "config", None)
    if config is None or any(True for _ in owner.parameters()):
        return None
    try:
        with torch.device("cpu"):
            fresh = type(owner)(config)
    except Exception:  # any failure means: this module cannot be rebuilt from its config alone
        return None
    value = fresh._buffers.get(leaf)
    return value if isinstance(value, torch.Tensor) and not value.is_meta else None


@contextlib.contextmanager
def fake_weights(model: nn.Module, mode: FakeTensorMode) -> Iterator[None]:
    """Swaps every parameter and buffer of `model` for a fake CPU tensor of its shape and
    dtype (one per original tensor, so tied weights stay tied), then puts the originals back."""
    fakes: dict[int, torch.Tensor] = {}
    swapped: list[tuple[dict, str, torch.Tensor]] = []

    def fake_of(value: torch.Tensor) -> torch.Tensor:
        if id(value) not in fakes:
            fakes[id(value)] = _fake_like(value, mode)
        return fakes[id(value)]

    try:
        for module in model.modules():
            for table in (module._parameters, module._buffers):
                for name, value in table.items():
                    if value is not None:
                        swapped.append((table, name, value))
                        table[name] = fake_of(value)
        yield
    finally:
        for table, name, value in swapped:
            table[name] = value

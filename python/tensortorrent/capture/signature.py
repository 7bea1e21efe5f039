"""What a compiled module accepts: the structure, shapes and dtypes it was compiled for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree

from ..errors import InputMismatchError, UnsupportedError


@dataclass(frozen=True)
class LeafSpec:
    """One flat input: its path in (args, kwargs) and what it must be."""

    path: str
    shape: tuple[int, ...] | None  # None: not a tensor
    dtype: torch.dtype | None
    device: torch.device | None
    value: Any = None  # the example value of a non-tensor input, which export baked in

    def describe(self) -> str:
        if self.shape is None:
            return f"{type(self.value).__name__} {self.value!r}"
        return f"tensor of shape {tuple(self.shape)} and dtype {self.dtype}"


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    return f"{type(value).__name__} {value!r}"


class InputSignature:
    """Checks a call's inputs against the example inputs and flattens them.

    Shapes are static: a compiled module accepts exactly the shapes and dtypes it was
    compiled for. Non-tensor inputs (flags, sizes) were specialized by export, so they must
    equal the example's values. Immutable; safe to share across threads.
    """

    def __init__(self, args: tuple, kwargs: dict) -> None:
        self.kwarg_names = tuple(kwargs)
        leaves_with_paths, self.spec = pytree.tree_flatten_with_path((args, kwargs))
        self.leaves = tuple(
            LeafSpec(
                path=_path_name(path),
                shape=tuple(v.shape) if isinstance(v, torch.Tensor) else None,
                dtype=v.dtype if isinstance(v, torch.Tensor) else None,
                device=v.device if isinstance(v, torch.Tensor) else None,
                value=None if isinstance(v, torch.Tensor) else v,
            )
            for path, v in leaves_with_paths
        )
        self._tensors_only = self._positional_tensors_only()

    def to_json(self) -> dict[str, Any]:
        """A JSON-able description, from which from_json rebuilds an equal signature."""
        leaves = []
        for leaf in self.leaves:
            if leaf.shape is None and not isinstance(leaf.value, (bool, int, float, str, type(None))):
                raise UnsupportedError(
                    f"input {leaf.path}: a constant of type {type(leaf.value).__name__} cannot be stored in an "
                    "artifact (only tensors, numbers, strings, booleans and None)"
                )
            leaves.append(
                {"path": leaf.path, "value": leaf.value}
                if leaf.shape is None
                else {
                    "path": leaf.path,
                    "shape": list(leaf.shape),
                    "dtype": str(leaf.dtype).removeprefix("torch."),
                    "device": str(leaf.device),
                }
            )
        return {"spec": pytree.treespec_dumps(self.spec), "kwarg_names": list(self.kwarg_names), "leaves": leaves}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> InputSignature:
        """The signature to_json described. Raises KeyError/ValueError/TypeError on bad data."""
        signature = cls.__new__(cls)
        signature.spec = _treespec(data["spec"])
        signature.kwarg_names = tuple(data["kwarg_names"])
        signature.leaves = tuple(
            LeafSpec(path=leaf["path"], shape=None, dtype=None, device=None, value=leaf["value"])
            if "shape" not in leaf
            else LeafSpec(
                path=leaf["path"],
                shape=tuple(int(d) for d in leaf["shape"]),
                dtype=_dtype(leaf["dtype"]),
                device=_device(leaf["device"]),
            )
            for leaf in data["leaves"]
        )
        if len(signature.leaves) != signature.spec.num_leaves:
            raise ValueError(f"{len(signature.leaves)} input leaves for a structure of {signature.spec.num_leaves}")
        signature._tensors_only = signature._positional_tensors_only()
        return signature

    def stand_in(self) -> tuple[tuple, dict]:
        """(args, kwargs) of the compiled shapes, dtypes and devices, to time regions where no
        example is at hand (an artifact loaded onto devices): normal draws for floating-point
        tensors, zeros for integer and boolean ones (an index every embedding takes), the
        constants export fixed. Drawn from a generator of their own: the caller's seed stays."""
        generator = torch.Generator().manual_seed(0)
        leaves = []
        for leaf in self.leaves:
            if leaf.shape is None:
                leaves.append(leaf.value)
            elif leaf.dtype.is_floating_point:
                leaves.append(torch.randn(leaf.shape, dtype=leaf.dtype, generator=generator).to(leaf.device))
            else:
                leaves.append(torch.zeros(leaf.shape, dtype=leaf.dtype, device=leaf.device))
        args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        return tuple(args), dict(kwargs)

    def _positional_tensors_only(self) -> bool:
        positional = pytree.tree_flatten((tuple(range(len(self.leaves))), {}))[1]
        return self.spec == positional and all(leaf.shape is not None for leaf in self.leaves)

    def describe(self) -> str:
        """A one-line summary such as 'args[0]: tensor of shape (8, 16) and dtype torch.float32'."""
        return "; ".join(f"{leaf.path}: {leaf.describe()}" for leaf in self.leaves) or "no inputs"

    def flatten(self, args: tuple, kwargs: dict) -> list[Any]:
        """The flat inputs, in the exported program's order, or InputMismatchError."""
        if self._tensors_only and not kwargs and len(args) == len(self.leaves):
            # The common call, positional tensors only, skips pytree's flatten (~10 us).
            if all(type(arg) is torch.Tensor for arg in args):
                for leaf, value in zip(self.leaves, args):
                    _check_leaf(leaf, value)
                return list(args)
        if set(kwargs) != set(self.kwarg_names):
            positional = len(pytree.tree_unflatten(list(range(self.spec.num_leaves)), self.spec)[0])
            raise InputMismatchError(
                f"compiled for {positional} positional input(s) and keyword inputs {sorted(self.kwarg_names)}, "
                f"got {len(args)} positional and keyword inputs {sorted(kwargs)}"
            )
        ordered_kwargs = {name: kwargs[name] for name in self.kwarg_names}
        flat, spec = pytree.tree_flatten((args, ordered_kwargs))
        if spec != self.spec:
            raise InputMismatchError(
                f"compiled for inputs structured as {_structure(self.spec)}, got {_structure(spec)}"
            )
        for leaf, value in zip(self.leaves, flat):
            _check_leaf(leaf, value)
        return flat


def _check_leaf(leaf: LeafSpec, value: Any) -> None:
    if leaf.shape is None:
        if isinstance(value, torch.Tensor) or type(value) is not type(leaf.value) or value != leaf.value:
            raise InputMismatchError(
                f"input {leaf.path}: compiled for the constant {leaf.describe()}, got {_describe(value)}"
            )
        return
    if not isinstance(value, torch.Tensor):
        raise InputMismatchError(f"input {leaf.path}: compiled for a {leaf.describe()}, got {_describe(value)}")
    if tuple(value.shape) != leaf.shape:
        raise InputMismatchError(f"input {leaf.path}: compiled for shape {leaf.shape}, got {tuple(value.shape)}")
    if value.dtype != leaf.dtype:
        raise InputMismatchError(f"input {leaf.path}: compiled for dtype {leaf.dtype}, got {value.dtype}")
    if value.device != leaf.device:
        raise InputMismatchError(f"input {leaf.path}: compiled for device {leaf.device}, got {value.device}")


def _path_name(path: tuple) -> str:
    # path starts with the index into (args, kwargs): 0 -> args, 1 -> kwargs
    head, rest = path[0], path[1:]
    root = "args" if getattr(head, "idx", None) == 0 else "kwargs"
    return root + "".join(str(key) for key in rest)


def _structure(spec: pytree.TreeSpec) -> str:
    """A short rendering of a (args, kwargs) spec: positional count, kwarg names, nesting."""
    args_spec, kwargs_spec = _children(spec)
    positional = ", ".join(_shape_of(child) for child in _children(args_spec))
    keywords = ", ".join(f"{k}={_shape_of(c)}" for k, c in zip(kwargs_spec.context or [], _children(kwargs_spec)))
    return f"({positional}{', ' if positional and keywords else ''}{keywords})"


def _shape_of(spec: pytree.TreeSpec) -> str:
    if spec.is_leaf():
        return "*"
    inner = ", ".join(_shape_of(c) for c in _children(spec))
    kind = spec.type.__name__ if spec.type is not None else "?"
    return {"tuple": f"({inner})", "list": f"[{inner}]", "dict": f"{{{inner}}}"}.get(kind, f"{kind}({inner})")


def _children(spec: pytree.TreeSpec) -> list[pytree.TreeSpec]:
    # torch 2.13 deprecates the children_specs attribute that torch 2.4 only has.
    return list(spec.children()) if hasattr(spec, "children") else list(spec.children_specs)


def _treespec(text: str) -> pytree.TreeSpec:
    try:
        return pytree.treespec_loads(text)
    except NotImplementedError as error:  # a type no one registered with pytree
        raise ValueError(f"input structure: {error}") from error


def _device(name: str) -> torch.device:
    try:
        return torch.device(name)
    except RuntimeError as error:  # torch's own refusal of a malformed name
        raise ValueError(f"device {name!r}: {error}") from error


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dtype

"""A compiled module as the server shows and runs it: its protocol inputs and outputs, the
batch size it was compiled for, and one execution of a batch of requests."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.utils._pytree as pytree

from ..errors import UnsupportedError
from ..runtime.call_handle import CallHandle
from ..runtime.compiled_module import CompiledModule
from .protocol import DATATYPE_OF, TensorSpec, leaf_name


@dataclass(frozen=True)
class ServedModel:
    """`batch_size`: the rows every tensor input and output has in its first dimension, which
    requests may fill in part and share (None: the model has no such dimension, and every
    request brings exactly the compiled shapes)."""

    name: str
    compiled: CompiledModule
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    batch_size: int | None

    @staticmethod
    def of(name: str, compiled: CompiledModule) -> ServedModel:
        leaves = compiled.input_signature.leaves
        tensors = [leaf for leaf in leaves if leaf.shape is not None]
        outputs = compiled.output_leaves()
        if any(meta is None for _, meta in outputs):
            raise UnsupportedError(f"serve: model {name!r}: every output must be one tensor of static shape")
        if not tensors:
            raise UnsupportedError(f"serve: model {name!r} takes no tensor input")
        for dtype, path in [(leaf.dtype, leaf.path) for leaf in tensors] + [(m[0], p) for p, m in outputs]:
            if dtype not in DATATYPE_OF:
                raise UnsupportedError(f"serve: model {name!r}: {path or 'its output'} has dtype {dtype}, not servable")
        firsts = {leaf.shape[0] if leaf.shape else None for leaf in tensors}
        firsts |= {shape[0] if shape else None for _, (_, shape) in outputs}
        batch = firsts.pop() if len(firsts) == 1 and None not in firsts else None

        def spec(name_: str, dtype: torch.dtype, shape: tuple[int, ...]) -> TensorSpec:
            shown = (-1, *shape[1:]) if batch is not None else shape
            return TensorSpec(name_, DATATYPE_OF[dtype], tuple(shown))

        return ServedModel(
            name=name,
            compiled=compiled,
            inputs=tuple(spec(leaf_name(leaf.path, "input"), leaf.dtype, leaf.shape) for leaf in tensors),
            outputs=tuple(spec(leaf_name(path, "output"), dtype, shape) for path, (dtype, shape) in outputs),
            batch_size=batch,
        )

    def metadata(self) -> dict:
        return {
            "name": self.name,
            "versions": ["1"],
            "platform": "tensortorrent",
            "inputs": [spec.as_json() for spec in self.inputs],
            "outputs": [spec.as_json() for spec in self.outputs],
        }

    def start(self, requests: list[dict[str, torch.Tensor]]) -> CallHandle:
        """Starts one call of the model on `requests`' inputs stacked along the batch
        dimension and padded with zeros to the compiled batch size."""
        signature = self.compiled.input_signature
        names = iter(spec.name for spec in self.inputs)
        flat = []
        for leaf in signature.leaves:
            if leaf.shape is None:
                flat.append(leaf.value)  # a constant the program was compiled for
                continue
            name = next(names)
            parts = [request[name] for request in requests]
            rows = sum(int(p.shape[0]) for p in parts) if self.batch_size is not None else leaf.shape[0]
            if self.batch_size is not None and rows < self.batch_size:
                parts.append(torch.zeros((self.batch_size - rows, *leaf.shape[1:]), dtype=leaf.dtype))
            flat.append(torch.cat(parts) if len(parts) > 1 else parts[0])
        args, kwargs = pytree.tree_unflatten(flat, signature.spec)
        return self.compiled.submit(*args, **kwargs)

    def split(self, outputs: object, rows: list[int]) -> list[dict[str, torch.Tensor]]:
        """Each request's own outputs, by name: its rows of every output."""
        flat = pytree.tree_leaves(outputs)
        answers, start = [], 0
        for count in rows:
            answers.append(
                {
                    spec.name: value[start : start + count] if self.batch_size is not None else value
                    for spec, value in zip(self.outputs, flat)
                }
            )
            start += count
        return answers

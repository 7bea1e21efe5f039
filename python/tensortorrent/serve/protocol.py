"""The KServe v2 inference protocol's tensors: names, datatypes, decoding a request's
inputs (checked against what the model was compiled for) and encoding outputs, as JSON
values or, with the binary tensor extension, as raw little-endian bytes after the JSON
header (an input's `parameters.binary_data_size`; outputs asked for with
`parameters.binary_data_output` or an output's `parameters.binary_data`)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import torch

DATATYPES = {
    "BOOL": torch.bool,
    "UINT8": torch.uint8,
    "INT8": torch.int8,
    "INT16": torch.int16,
    "INT32": torch.int32,
    "INT64": torch.int64,
    "FP16": torch.float16,
    "BF16": torch.bfloat16,
    "FP32": torch.float32,
    "FP64": torch.float64,
}
DATATYPE_OF = {dtype: name for name, dtype in DATATYPES.items()}


class RequestError(Exception):
    """A request the server refuses: `status` is its HTTP status, the message says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ClientGone(RequestError):
    """The client hung up before its request was read whole (nginx's 499: nobody gets the answer)."""

    def __init__(self, message: str) -> None:
        super().__init__(499, message)


@dataclass(frozen=True)
class TensorSpec:
    """One input or output as the protocol shows it: the batch dimension, where the model
    has one, is -1 (any count up to the batch size it was compiled for)."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


def leaf_name(path: str, prefix: str) -> str:
    """A protocol name for a flat input or output, from its path ("args[0]" -> "input_0",
    "kwargs['attention_mask']" -> "attention_mask", "['logits']" -> "logits", "" -> "output_0")."""
    keys = [a or b or c for a, b, c in re.findall(r"\['([^']*)'\]|\[(\d+)\]|\.(\w+)", path)]
    name = ""
    for key in keys or ["0"]:
        if key.isdigit():
            name += f"_{key}" if name else f"{prefix}_{key}"
        else:
            name += f".{key}" if name else key
    return name


def decode_inputs(
    body: object, specs: list[TensorSpec], batch_size: int | None, binary: bytes = b""
) -> tuple[dict[str, torch.Tensor], int]:
    """The tensors of a request body's "inputs", by name, and the rows it carries (its batch
    count; 1 for a model without a batch dimension); `binary`: the bytes after the JSON
    header, which inputs with a binary_data_size take in order. RequestError(400) names
    what is wrong."""
    if not isinstance(body, dict) or not isinstance(body.get("inputs"), list):
        raise RequestError(400, 'expected a JSON object with an "inputs" list')
    by_name = {spec.name: spec for spec in specs}
    tensors: dict[str, torch.Tensor] = {}
    offset = 0
    for item in body["inputs"]:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise RequestError(400, 'each input must be an object with a "name"')
        name = item["name"]
        if name not in by_name:
            raise RequestError(400, f"unknown input {name!r}; the model's inputs are {sorted(by_name)}")
        if name in tensors:
            raise RequestError(400, f"input {name!r} given twice")
        tensors[name], offset = _decode(item, by_name[name], batch_size, binary, offset)
    if offset != len(binary):
        raise RequestError(400, f"{len(binary) - offset} bytes of binary data after the inputs' own")
    missing = sorted(set(by_name) - set(tensors))
    if missing:
        raise RequestError(400, f"missing inputs {missing}")
    rows = {int(t.shape[0]) for t in tensors.values()} if batch_size is not None else {1}
    if len(rows) > 1:
        raise RequestError(400, f"inputs disagree on the batch dimension: {sorted(rows)}")
    return tensors, rows.pop()


def _decode(
    item: dict, spec: TensorSpec, batch_size: int | None, binary: bytes, offset: int
) -> tuple[torch.Tensor, int]:
    """The input's tensor, and where the next input's binary data starts."""
    where = f"input {spec.name!r}"
    if item.get("datatype") != spec.datatype:
        raise RequestError(400, f"{where}: expected datatype {spec.datatype}, got {item.get('datatype')!r}")
    shape = item.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise RequestError(400, f"{where}: expected a shape as a list of integers, got {shape!r}")
    if len(shape) != len(spec.shape) or any(want != -1 and want != got for want, got in zip(spec.shape, shape)):
        raise RequestError(400, f"{where}: expected shape {list(spec.shape)}, got {shape}")
    if batch_size is not None and not 1 <= shape[0] <= batch_size:
        raise RequestError(400, f"{where}: expected 1 to {batch_size} rows, got {shape[0]}")
    dtype = DATATYPES[spec.datatype]
    size = (item.get("parameters") or {}).get("binary_data_size")
    if size is not None:
        expected = math.prod(shape) * dtype.itemsize
        if size != expected or offset + size > len(binary):
            raise RequestError(
                400,
                f"{where}: shape {shape} of {spec.datatype} takes {expected} bytes; binary_data_size is "
                f"{size!r} with {len(binary) - offset} bytes left",
            )
        raw = bytearray(binary[offset : offset + size])
        return torch.frombuffer(raw, dtype=torch.uint8).view(dtype).reshape(shape), offset + size
    data = _flat(item.get("data"), where)
    if len(data) != math.prod(shape):
        raise RequestError(400, f"{where}: shape {shape} holds {math.prod(shape)} values, got {len(data)}")
    if dtype != torch.bool and any(isinstance(value, bool) for value in data):
        raise RequestError(400, f"{where}: data is not {spec.datatype}: it holds true or false")
    try:
        tensor = torch.tensor(data, dtype=dtype).reshape(shape)
    except (TypeError, ValueError, RuntimeError, OverflowError) as error:
        raise RequestError(400, f"{where}: data is not {spec.datatype}: {error}") from None
    if dtype.is_floating_point and torch.isinf(tensor).any():
        widest = torch.finfo(dtype).max
        if any(abs(value) > widest and math.isfinite(value) for value in data):
            raise RequestError(400, f"{where}: data is not {spec.datatype}: a value beyond its range (+-{widest:.4g})")
    return tensor, offset


def _flat(data: object, where: str) -> list:
    """Row-major values; nested lists are flattened, as the protocol allows."""
    if not isinstance(data, list):
        raise RequestError(400, f'{where}: expected its values as a list under "data", got {type(data).__name__}')
    flat: list = []
    stack = [iter(data)]
    while stack:
        for value in stack[-1]:
            if isinstance(value, list):
                stack.append(iter(value))
                break
            flat.append(value)
        else:
            stack.pop()
    return flat


def binary_outputs(body: dict, names: list[str]) -> dict[str, bool]:
    """The outputs a request asks for (all, when it names none), each with whether it
    wants raw bytes. RequestError(400) for an output the model does not have."""
    default = bool((body.get("parameters") or {}).get("binary_data_output", False))
    asked = body.get("outputs")
    if asked is None:
        return {name: default for name in names}
    if not isinstance(asked, list) or not all(isinstance(o, dict) and isinstance(o.get("name"), str) for o in asked):
        raise RequestError(400, '"outputs" must be a list of objects with a "name"')
    unknown = sorted({o["name"] for o in asked} - set(names))
    if unknown:
        raise RequestError(400, f"unknown outputs {unknown}; the model's outputs are {names}")
    return {o["name"]: bool((o.get("parameters") or {}).get("binary_data", default)) for o in asked}


def encode_output(name: str, tensor: torch.Tensor, binary: bool = False) -> tuple[dict[str, Any], bytes]:
    """The output's JSON entry, and its raw bytes where `binary` (else b"")."""
    values = tensor.detach().cpu().contiguous()
    entry: dict[str, Any] = {"name": name, "datatype": DATATYPE_OF[tensor.dtype], "shape": list(tensor.shape)}
    if binary:
        raw = values.reshape(-1).view(torch.uint8).numpy().tobytes()
        entry["parameters"] = {"binary_data_size": len(raw)}
        return entry, raw
    if values.dtype.is_floating_point and not torch.isfinite(values).all():
        raise RequestError(
            422,
            f"output {name!r} holds inf or nan, which JSON numbers cannot carry; ask for it as binary data "
            '("parameters": {"binary_data": true})',
        )
    if values.dtype in (torch.float16, torch.bfloat16):
        values = values.float()  # JSON numbers; the datatype says what they were
    entry["data"] = values.flatten().tolist()
    return entry, b""

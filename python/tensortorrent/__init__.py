"""TensorTorrent: a heterogeneous PyTorch compiler and runtime for one machine."""

import logging

from .api import compile
from .config import CompileConfig
from .errors import (
    CaptureError,
    ConfigTypeError,
    ConfigValueError,
    ExecutionCancelled,
    ExecutionStalled,
    InputMismatchError,
    InternalError,
    InvalidArgumentError,
    ScheduleError,
    TensorTorrentError,
    UnsupportedError,
)
from .runtime import CompiledModule

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "CaptureError",
    "CompileConfig",
    "CompiledModule",
    "ConfigTypeError",
    "ConfigValueError",
    "ExecutionCancelled",
    "ExecutionStalled",
    "InputMismatchError",
    "InternalError",
    "InvalidArgumentError",
    "ScheduleError",
    "TensorTorrentError",
    "UnsupportedError",
    "__version__",
    "compile",
]

"""TensorTorrent: a heterogeneous PyTorch compiler and runtime for one machine."""

import logging

from .api import compile, compile_modules
from .capture.graph_values import GraphInput, NodeOutput
from .capture.module_graph import ModuleGraph, ModuleNode
from .compression import quantize_checkpoint
from .config import CompileConfig
from .errors import (
    ArgumentValueError,
    ArtifactError,
    CaptureError,
    CheckpointError,
    ConfigTypeError,
    ConfigValueError,
    ExecutionCancelled,
    ExecutionStalled,
    GraphCaptureError,
    GraphDefinitionError,
    GraphDefinitionTypeError,
    InputMismatchError,
    InternalError,
    InvalidArgumentError,
    MemoryCapacityError,
    ModuleClosedError,
    NumericsError,
    PlanningError,
    ScheduleError,
    StorageError,
    TensorTorrentError,
    UnsafeArtifactError,
    UnsupportedError,
    UnsupportedFeatureError,
)
from .fit import fit
from .generation import GenerativeModule, compile_for_generation
from .hardware.virtual import VirtualDevice
from .load import load_compiled
from .objective import Objective
from .runtime import CompiledModule
from .version import __version__

logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "quantize_checkpoint",
    "GenerativeModule",
    "compile_for_generation",
    "ArgumentValueError",
    "ArtifactError",
    "StorageError",
    "UnsafeArtifactError",
    "load_compiled",
    "CaptureError",
    "CheckpointError",
    "CompileConfig",
    "CompiledModule",
    "ConfigTypeError",
    "ConfigValueError",
    "ExecutionCancelled",
    "ExecutionStalled",
    "GraphCaptureError",
    "GraphDefinitionError",
    "GraphDefinitionTypeError",
    "GraphInput",
    "InputMismatchError",
    "InternalError",
    "InvalidArgumentError",
    "MemoryCapacityError",
    "ModuleClosedError",
    "NumericsError",
    "ModuleGraph",
    "ModuleNode",
    "NodeOutput",
    "Objective",
    "PlanningError",
    "ScheduleError",
    "TensorTorrentError",
    "UnsupportedError",
    "UnsupportedFeatureError",
    "VirtualDevice",
    "__version__",
    "compile",
    "compile_modules",
    "fit",
]

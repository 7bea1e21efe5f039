"""The exceptions TensorTorrent raises: one hierarchy under TensorTorrentError.

Classes that also derive from a builtin (TypeError, ValueError, ...) let callers catch
either the TensorTorrent type or the familiar Python one.
"""

from __future__ import annotations

from collections.abc import Sequence


class TensorTorrentError(Exception):
    """Base class of every error TensorTorrent raises on purpose."""


class ConfigTypeError(TensorTorrentError, TypeError):
    """A CompileConfig field or TT_* variable has the wrong type."""


class ConfigValueError(TensorTorrentError, ValueError):
    """A CompileConfig field or TT_* variable has a value outside its allowed range."""


class InvalidArgumentError(TensorTorrentError, TypeError):
    """An argument of a public function is not of the kind it takes (not an nn.Module, ...)."""


class GraphDefinitionError(TensorTorrentError, ValueError):
    """A ModuleGraph is malformed: empty, a duplicate name, a reference out of order or selecting nothing."""


class GraphDefinitionTypeError(TensorTorrentError, TypeError):
    """A part of a ModuleGraph has the wrong type: a node that is not an nn.Module, a name or key not a str."""


class CaptureError(TensorTorrentError):
    """torch.export could not capture the model; the message carries export's reason."""


GraphCaptureError = CaptureError  # the earlier project's name for it: one class, both names


class InputMismatchError(TensorTorrentError, ValueError):
    """A call's inputs differ in structure, shape, dtype or device from those compiled for."""


class MemoryCapacityError(TensorTorrentError, MemoryError):
    """The model's weights exceed the memory a plan can keep them in; says what is needed and available.

    `smallest_budget_bytes`, where known, is the smallest RAM budget with which the model
    compiles: the one the message names.
    """

    def __init__(self, message: str, *, smallest_budget_bytes: int | None = None) -> None:
        super().__init__(message)
        self.smallest_budget_bytes = smallest_budget_bytes


class PlanningError(MemoryCapacityError):
    """No plan fits the machine: names the tier, the bytes needed there and the bytes it allows."""

    def __init__(
        self,
        message: str,
        *,
        tier: str,
        needed_bytes: int,
        allowed_bytes: int,
        smallest_budget_bytes: int | None = None,
    ) -> None:
        super().__init__(message, smallest_budget_bytes=smallest_budget_bytes)
        self.tier = tier
        self.needed_bytes = needed_bytes
        self.allowed_bytes = allowed_bytes


class ArtifactError(TensorTorrentError):
    """A saved artifact is missing, damaged or not readable by this version; names the file."""


class UnsafeArtifactError(ArtifactError):
    """An artifact holds parts that could run code when loaded (pickles, native libraries)."""


class CheckpointError(TensorTorrentError, ValueError):
    """A checkpoint is missing, unreadable, inconsistent or does not fit the model; names the
    file or tensors. A failed match lists the names `.missing`, `.unexpected` and `.mismatched`."""

    def __init__(
        self,
        message: str,
        *,
        missing: Sequence[str] = (),
        unexpected: Sequence[str] = (),
        mismatched: Sequence[str] = (),
    ) -> None:
        super().__init__(message)
        self.missing = list(missing)
        self.unexpected = list(unexpected)
        self.mismatched = list(mismatched)


class UnsupportedError(TensorTorrentError):
    """A valid request that this version does not support yet."""


class UnsupportedFeatureError(UnsupportedError):
    """Two features that each work but cannot be combined yet; `.features` names both."""

    def __init__(self, feature: str, other: str, hint: str = "") -> None:
        super().__init__(f"{feature} cannot be combined with {other} yet" + (f"; {hint}" if hint else ""))
        self.features = (feature, other)


class NumericsError(TensorTorrentError, ArithmeticError):
    """A compiled module's output differs from eager PyTorch's beyond the tolerances
    (CompileConfig.validate_numerics); `.output` names the output, `.max_abs_diff` is the
    largest difference, `.atol` and `.rtol` the tolerances."""

    def __init__(self, message: str, *, output: str, max_abs_diff: float, atol: float, rtol: float) -> None:
        super().__init__(message)
        self.output = output
        self.max_abs_diff = max_abs_diff
        self.atol = atol
        self.rtol = rtol


class ArgumentValueError(TensorTorrentError, ValueError):
    """An argument of a public function is of the right kind but outside the values it takes."""


class ScheduleError(TensorTorrentError, ValueError):
    """A schedule or native option was rejected (native code InvalidArgument)."""


class NotFoundError(TensorTorrentError, LookupError):
    """A named thing does not exist (native code NotFound)."""


class ResourceExhaustedError(MemoryCapacityError):
    """A memory or capacity budget cannot be met at run time (native code ResourceExhausted):
    the native ledger or a program's memory plan refused it."""


class IncompatibleError(TensorTorrentError):
    """Valid input that this build or machine cannot run (native code Incompatible)."""


class StorageError(TensorTorrentError):
    """Reading or writing stored bytes failed; the message names the file and the offset."""


class DataCorruptionError(StorageError):
    """Stored bytes failed an integrity check, or a file ends early (native code DataCorruption)."""


class StorageIOError(StorageError, OSError):
    """The operating system refused a read or write (native code IO)."""


class ExecutionCancelled(TensorTorrentError):
    """The call stopped because request_cancel() was called (native code Cancelled)."""


class ModuleClosedError(TensorTorrentError, ValueError):
    """A CompiledModule was called (or saved) after close(), which released its program."""


class ExecutionStalled(TensorTorrentError, TimeoutError):
    """No region finished within CompileConfig.stall_timeout_s (native code Stalled)."""


class InternalError(TensorTorrentError, RuntimeError):
    """A broken invariant inside TensorTorrent: a bug worth reporting (native code Internal)."""


NATIVE_ERROR_CLASSES: dict[str, type[TensorTorrentError]] = {
    "InvalidArgument": ScheduleError,
    "NotFound": NotFoundError,
    "ResourceExhausted": ResourceExhaustedError,
    "Incompatible": IncompatibleError,
    "DataCorruption": DataCorruptionError,
    "IO": StorageIOError,
    "Cancelled": ExecutionCancelled,
    "Stalled": ExecutionStalled,
    "Internal": InternalError,
}


def native_error_class(code: str) -> type[TensorTorrentError]:
    """The exception class for a native error code; the bindings' translator calls this."""
    return NATIVE_ERROR_CLASSES.get(code, InternalError)

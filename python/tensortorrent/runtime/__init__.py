"""Runtime: the compiled module and the per-call state its region kernels share."""

from .compiled_module import CompiledModule

__all__ = ["CompiledModule"]

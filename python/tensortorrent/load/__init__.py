"""tt.load_compiled: artifacts loaded back into compiled modules."""

from .compiled import load_compiled

__all__ = ["load_compiled"]

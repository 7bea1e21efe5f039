"""ExecutableArtifact: a compiled program saved as a directory, and loaded back safely."""

from .load import load_compiled
from .save import save_compiled

__all__ = ["load_compiled", "save_compiled"]

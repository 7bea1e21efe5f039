"""ExecutableArtifact: a compiled program saved as a directory, and loaded back safely."""

from ..runtime.compiled_module import register_saver
from .load import load_compiled
from .save import save_compiled

register_saver(save_compiled)  # compiled.save() writes through this package, which the runtime never imports

__all__ = ["load_compiled", "save_compiled"]

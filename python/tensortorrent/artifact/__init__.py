"""ExecutableArtifact: a compiled program saved as a directory (save.py), and the readers
that open one safely (integrity, manifest, program archive, weight references);
tensortorrent/load.py (tt.load_compiled) builds a module from what they read."""

from ..runtime.compiled_module import register_saver
from .save import save_compiled

register_saver(save_compiled)  # compiled.save() writes through this package, which the runtime never imports

__all__ = ["save_compiled"]

"""ExecutableArtifact: a compiled program saved as a directory (save.py), and loaded back
safely (load.py, which tt.load_compiled is; it is not imported here, since loading onto
devices builds through tensortorrent.build, which streams weights through this package)."""

from ..runtime.compiled_module import register_saver
from .save import save_compiled

register_saver(save_compiled)  # compiled.save() writes through this package, which the runtime never imports

__all__ = ["save_compiled"]

"""ExecutableArtifact: a compiled program saved as a directory (save.py), and the readers
that open one safely (integrity, manifest, program archive, weight references);
tensortorrent/load.py (tt.load_compiled) builds a module from what they read."""

from .save import save_compiled

__all__ = ["save_compiled"]

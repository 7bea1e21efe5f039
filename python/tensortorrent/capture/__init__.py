"""Capture: torch.export of the user's model, normalized into one graph with value slots."""

from .export import capture_model
from .program import NormalizedProgram, normalize
from .signature import InputSignature

__all__ = ["capture_model", "NormalizedProgram", "normalize", "InputSignature"]

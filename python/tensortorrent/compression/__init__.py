"""Compressed weights: linear layers' weights stored, streamed and held as int8 or int4 (weight-only)."""

from .checkpoint import quantize_checkpoint
from .int4_linear import Int4Linear
from .int8_linear import Int8Linear
from .model import compressed_model, weight_format_summary

__all__ = ["Int4Linear", "Int8Linear", "compressed_model", "quantize_checkpoint", "weight_format_summary"]

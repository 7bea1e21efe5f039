"""Compressed weights: linear layers' weights stored, streamed and held as int8 (weight-only)."""

from .int8_linear import Int8Linear
from .model import compressed_model, weight_format_summary

__all__ = ["Int8Linear", "compressed_model", "weight_format_summary"]

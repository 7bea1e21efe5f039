"""Text generation: a causal LM compiled as decode and prefill programs sharing one KV cache."""

from .compile import compile_for_generation
from .module import GenerativeModule

__all__ = ["GenerativeModule", "compile_for_generation"]

"""Settings read from environment variables (TT_*), with clear errors for bad values."""

from __future__ import annotations

import os

from .errors import ConfigValueError


def env_flag(name: str) -> bool | None:
    """The value of a 0/1 environment variable, or None when it is unset or empty."""
    raw = os.environ.get(name, "").strip()
    if raw == "":
        return None
    if raw not in ("0", "1"):
        raise ConfigValueError(f"environment variable {name}: expected 0 or 1, got {raw!r}")
    return raw == "1"


def env_int(name: str, minimum: int = 0) -> int | None:
    """The value of an integer environment variable, or None when it is unset or empty."""
    raw = os.environ.get(name, "").strip()
    if raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ConfigValueError(f"environment variable {name}: expected an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigValueError(f"environment variable {name}: expected an integer >= {minimum}, got {value}")
    return value

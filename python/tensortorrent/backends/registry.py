"""The backends this process has: the built-in ones, then third parties' from the
`tensortorrent.backends` entry-point group.

A package registers one in its metadata, for example in pyproject.toml:

    [project.entry-points."tensortorrent.backends"]
    mydevice = "mypackage.backend:MyBackend"

The object named is a DeviceBackend, or a class or function that returns one when
called without arguments. An entry point that fails to load, or gives something else,
is left out and reported (by `plugin_problems()` and `tensortorrent doctor`), naming it
and why: one broken plugin never hides the other devices.
"""

from __future__ import annotations

import functools
import logging
from importlib.metadata import entry_points

from .cpu import CpuBackend
from .interface import DeviceBackend
from .torch_accelerator import TorchAcceleratorBackend

log = logging.getLogger(__name__)

GROUP = "tensortorrent.backends"
BUILTIN_KINDS = ("cpu", "cuda", "xpu", "virtual")  # virtual: declared per compile, not discovered


def builtin_backends() -> list[DeviceBackend]:
    return [CpuBackend(), TorchAcceleratorBackend("cuda"), TorchAcceleratorBackend("xpu")]


@functools.cache
def _plugins() -> tuple[tuple[DeviceBackend, ...], tuple[str, ...]]:
    loaded, problems = [], []
    for point in entry_points(group=GROUP):
        where = f"entry point {point.name!r} ({point.value}) of group {GROUP!r}"
        try:
            found = point.load()
            backend = found if isinstance(found, DeviceBackend) else found()
        except Exception as error:  # a third party's code: whatever it raises is reported, not raised
            problems.append(f"{where} failed to load: {type(error).__name__}: {error}")
            continue
        kind = getattr(backend, "kind", None)
        if not isinstance(backend, DeviceBackend):
            problems.append(f"{where} gave a {type(backend).__name__}, expected a tensortorrent DeviceBackend")
        elif not isinstance(kind, str) or not kind.isidentifier() or kind in BUILTIN_KINDS:
            problems.append(f"{where}: kind {kind!r} must be an identifier other than {', '.join(BUILTIN_KINDS)}")
        elif any(other.kind == kind for other in loaded):
            problems.append(f"{where}: kind {kind!r} is already served by another plugin")
        else:
            loaded.append(backend)
    for problem in problems:
        log.warning("device backend left out: %s", problem)
    return tuple(loaded), tuple(problems)


def plugin_backends() -> list[DeviceBackend]:
    """The third-party backends that loaded (once per process)."""
    return list(_plugins()[0])


def plugin_problems() -> list[str]:
    """Why each entry point left out was left out."""
    return list(_plugins()[1])


def backends() -> list[DeviceBackend]:
    """Every backend with devices to discover: the CPU, CUDA, XPU, then plugins."""
    return builtin_backends() + plugin_backends()


def backend_of(kind: str) -> DeviceBackend | None:
    return next((backend for backend in backends() if backend.kind == kind), None)


def reload_plugins() -> None:
    """Forgets the loaded plugins, so that the next query loads the entry points again."""
    _plugins.cache_clear()

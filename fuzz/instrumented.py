"""Coverage for atheris targets of an editable install.

atheris instruments modules as they are imported, through the standard source loader;
an editable install (scikit-build-core's) loads tensortorrent through a loader of its own,
which atheris passes by, so the fuzzer would run blind. Instead, after import, every
function and method defined in the package's loaded modules is replaced by its
instrumented copy (atheris.instrument_func), where the modules look them up."""

from __future__ import annotations

import inspect
import sys

import atheris


def instrument_package(prefix: str = "tensortorrent") -> int:
    """Instruments the functions and methods of the loaded modules under `prefix`; returns how many."""
    count = 0
    for name, module in list(sys.modules.items()):
        if module is None or not (name == prefix or name.startswith(prefix + ".")):
            continue
        for owner in [module, *(v for v in vars(module).values() if inspect.isclass(v) and v.__module__ == name)]:
            for attribute, value in list(vars(owner).items()):
                function = value.__func__ if isinstance(value, staticmethod | classmethod) else value
                if inspect.isfunction(function) and function.__module__ == name:
                    instrumented = atheris.instrument_func(function)
                    wrapped = (
                        type(value)(instrumented) if isinstance(value, staticmethod | classmethod) else instrumented
                    )
                    setattr(owner, attribute, wrapped)
                    count += 1
    return count

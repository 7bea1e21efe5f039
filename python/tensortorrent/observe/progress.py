"""Compile progress: a rich display on a terminal once compiling takes more than a moment."""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections.abc import Iterator

from ..environment import env_flag

log = logging.getLogger("tensortorrent.compile")

SHOW_AFTER_S = 0.5  # compiles faster than this stay silent


def progress_enabled() -> bool:
    """True when stderr is a terminal and TT_PROGRESS is not 0."""
    if env_flag("TT_PROGRESS") is False:
        return False
    return sys.stderr.isatty()


class CompileProgress:
    """Shows the current compile stage; the display appears only after SHOW_AFTER_S.

    Stages are always logged (at DEBUG) with their durations. Used by one thread.
    """

    def __init__(self, stages: list[str], enabled: bool | None = None) -> None:
        self._stages = stages
        self._enabled = progress_enabled() if enabled is None else enabled
        self._lock = threading.Lock()
        self._progress = None
        self._task = None
        self._current = ""
        self._done = 0
        self._timer: threading.Timer | None = None

    def __enter__(self) -> CompileProgress:
        if self._enabled:
            self._timer = threading.Timer(SHOW_AFTER_S, self._show)
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            if self._progress is not None:
                self._progress.stop()
                self._progress = None
            self._enabled = False

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Marks `name` as the running stage for the duration of the block."""
        start = time.perf_counter()
        with self._lock:
            self._current = name
            self._update()
        yield
        log.debug("compile stage %s took %.3f s", name, time.perf_counter() - start)
        with self._lock:
            self._done += 1
            self._update()

    def region_compiling(self, index: int, count: int, what: str = "compile regions") -> None:
        """Shows which region of `count` the running stage is compiling (`what`: for which device)."""
        with self._lock:
            self._current = f"{what} ({index + 1}/{count})"
            self._update()
        log.debug("%s: region %d of %d", what, index + 1, count)

    def _show(self) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        with self._lock:
            if not self._enabled:
                return
            self._progress = Progress(
                TextColumn("[bold]tensortorrent[/] compile: {task.description}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total} stages"),
                TimeElapsedColumn(),
                transient=True,
            )
            self._task = self._progress.add_task(self._current, total=len(self._stages))
            self._update()
            self._progress.start()

    def _update(self) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=self._current, completed=self._done)

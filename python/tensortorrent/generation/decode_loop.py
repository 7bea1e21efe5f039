"""The decode loop: generations that come and go share the compiled batch, a step at a time.

Every program call covers all batch_size rows and writes the cache at one position for
them all: the loop's write pointer. A generation takes free rows and joins at its
prefill: its prompts, left-padded to the longest of those joining, are written at the
pointer's positions while the rows already generating sit those calls out (their mask
hides those positions from them: a few positions of their cache go unused). Then each
decode step feeds every generating row its last token, and each generation chooses its
rows' next tokens with its own settings and generator, as a lone generate() would. A
generation leaves, freeing its rows, once every row of it has ended (an end token,
max_new_tokens, or a cancel). With nothing generating, the pointer goes back to the
cache's start. One joins only if its needs, and what those generating may still need,
fit the cache after the pointer; otherwise it waits for them to leave (first come,
first served)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch

from ..artifact.save_generation import DECODE
from ..errors import ExecutionCancelled, ModuleClosedError
from .sampling import Sampling

Program = Callable[..., torch.Tensor]  # (ids, cache mask, positions, start) -> each row's last logits


@dataclass(frozen=True)
class Request:
    """One generation's arguments, checked: `ids` and `mask` its left-padded prompts."""

    ids: torch.Tensor
    mask: torch.Tensor
    max_new_tokens: int
    sampling: Sampling
    stops: list[int]
    pad: int
    seed: int | None
    streamer: Streamer


class Streamer:
    """Tells a caller of the prompt, each step's tokens (one per row) and the end."""

    def __init__(self, put: Callable | None = None, end: Callable | None = None, call: Callable | None = None):
        self._put, self._end, self._call = put, end, call

    def begin(self, prompts: torch.Tensor) -> None:
        if self._put is not None:
            self._put(prompts)

    def tokens(self, tokens: torch.Tensor) -> None:
        if self._put is not None:
            self._put(tokens)
        elif self._call is not None:
            self._call(tokens)

    def end(self) -> None:
        if self._end is not None:
            self._end()


def prefill_chunks(length: int, lengths: Sequence[int]) -> list[int]:
    """`length` tokens as a sum of compiled program lengths, the longest that fits first
    (the decode program's 1 takes what no prompt length fits)."""
    sizes = sorted(set(lengths) | {DECODE}, reverse=True)
    chunks = []
    while length:
        size = next(s for s in sizes if s <= length)
        chunks.append(size)
        length -= size
    return chunks


@dataclass(eq=False)
class _Generation:
    request: Request
    cancelled: threading.Event
    future: Future = field(default_factory=Future)
    rows: list[int] = field(default_factory=list)
    generator: torch.Generator | None = None
    sequences: torch.Tensor | None = None  # prompts and the tokens so far
    unfinished: torch.Tensor | None = None  # per row: no end token yet
    last: torch.Tensor | None = None  # per row: the token the next step feeds
    positions: torch.Tensor | None = None  # per row: the position of that token
    produced: int = 0

    @property
    def remaining(self) -> int:
        """Decode steps it may still take: each feeds one token, the last one chosen is never fed."""
        return self.request.max_new_tokens - self.produced


class DecodeLoop:
    """Runs generations on `programs` (tokens per call -> program; DECODE decodes) on a
    thread of its own, started by a submit and ended when no generation is left (so that
    an idle loop holds nothing: a module never closed is freed at exit)."""

    def __init__(self, programs: dict[int, Program], batch_size: int, max_length: int) -> None:
        self._programs, self._batch_size, self._max_length = programs, batch_size, max_length
        self._lengths = [length for length in programs if length != DECODE]
        self._lock = threading.Lock()  # guards the queue, the rows and the thread
        self._waiting: deque[_Generation] = deque()
        self._active: list[_Generation] = []
        self._free = list(range(batch_size))
        self._start = 0  # the write pointer: where the next call's tokens go in the cache
        self._mask = torch.zeros((batch_size, max_length), dtype=torch.long)  # per row: positions it sees
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, request: Request, cancelled: threading.Event) -> Future:
        """Queues a generation; the future gets its token ids, or what stopped it."""
        generation = _Generation(request, cancelled)
        with self._lock:
            if self._closed:
                raise ModuleClosedError("this GenerativeModule was closed")
            self._waiting.append(generation)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="tt-decode-loop", daemon=True)
                self._thread.start()
        return generation.future

    @property
    def rows_in_use(self) -> int:
        return self._batch_size - len(self._free)

    def close(self) -> None:
        """Ends the loop once the generations running now end; those waiting fail with
        ModuleClosedError."""
        with self._lock:
            self._closed = True
            waiting, self._waiting = list(self._waiting), deque()
            thread = self._thread
        for generation in waiting:
            generation.future.set_exception(
                ModuleClosedError("the GenerativeModule was closed before this generation ran")
            )
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _loop(self) -> None:
        while True:
            with self._lock:
                if not self._active and not self._waiting:
                    self._thread = None
                    return
                joining = self._admit()
            try:
                self._leave_cancelled()
                if joining:
                    self._join(joining)
                if self._active:
                    self._step()
            except BaseException as error:  # a failed call fails every generation it served
                for generation in self._active + [g for g in joining if not g.future.done()]:
                    self._leave(generation, error)

    def _admit(self) -> list[_Generation]:
        """Takes the waiting generations that fit now, first come first served (under the lock)."""
        if not self._active:
            self._start = 0
        joining: list[_Generation] = []
        while self._waiting:
            head = self._waiting[0]
            if head.cancelled.is_set():
                self._waiting.popleft()
                head.future.set_exception(ExecutionCancelled("the generation was cancelled after 0 new token(s)"))
                continue
            candidates = joining + [head]
            rows = sum(g.request.ids.shape[0] for g in candidates)
            length = max(g.request.ids.shape[1] for g in candidates)
            still = max((g.remaining for g in self._active), default=0)
            needs = max([still] + [g.request.max_new_tokens - 1 for g in candidates])
            if rows > len(self._free) or self._start + length + needs > self._max_length:
                break
            joining.append(self._waiting.popleft())
        for generation in joining:
            count = generation.request.ids.shape[0]
            generation.rows, self._free = self._free[:count], self._free[count:]
        return joining

    def _join(self, joining: list[_Generation]) -> None:
        """Prefills the joining generations' prompts at the pointer, then chooses their first tokens."""
        length = max(g.request.ids.shape[1] for g in joining)
        ids = torch.zeros((self._batch_size, length), dtype=torch.long)
        positions = torch.zeros((self._batch_size, length), dtype=torch.long)
        span = slice(self._start, self._start + length)
        for generation in joining:
            request, rows = generation.request, generation.rows
            padding = length - request.ids.shape[1]
            mask = torch.nn.functional.pad(request.mask, (padding, 0))
            ids[rows] = torch.nn.functional.pad(request.ids, (padding, 0), value=request.pad)
            positions[rows] = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
            self._mask[rows] = 0
            self._mask[rows, span] = mask
        logits, done = None, 0
        for size in prefill_chunks(length, self._lengths):
            chunk = slice(done, done + size)
            logits = self._programs[size](ids[:, chunk], self._mask, positions[:, chunk], torch.tensor(self._start))
            self._start, done = self._start + size, done + size
        for generation in joining:
            request = generation.request
            generation.generator = torch.Generator().manual_seed(request.seed) if request.seed is not None else None
            generation.sequences = request.ids
            generation.unfinished = torch.ones(len(generation.rows), dtype=torch.bool)
            generation.positions = positions[generation.rows, -1] + 1
            request.streamer.begin(request.ids)
            self._active.append(generation)
            self._choose(generation, logits)

    def _step(self) -> None:
        """One decode call: every generating row's last token, then each generation's next tokens."""
        ids = torch.zeros((self._batch_size, 1), dtype=torch.long)
        positions = torch.zeros((self._batch_size, 1), dtype=torch.long)
        self._mask[:, self._start] = 0
        for generation in self._active:
            ids[generation.rows, 0] = generation.last
            positions[generation.rows, 0] = generation.positions
            self._mask[generation.rows, self._start] = 1
        logits = self._programs[DECODE](ids, self._mask, positions, torch.tensor(self._start))
        self._start += 1
        for generation in list(self._active):
            generation.positions = generation.positions + 1
            self._choose(generation, logits)

    def _choose(self, generation: _Generation, logits: torch.Tensor) -> None:
        """Its rows' next tokens (a row that ended gets padding); it leaves when done."""
        request = generation.request
        tokens = request.sampling.next_tokens(logits[generation.rows], generation.sequences, generation.generator)
        tokens = torch.where(generation.unfinished, tokens, torch.full_like(tokens, request.pad))
        generation.sequences = torch.cat([generation.sequences, tokens[:, None]], dim=1)
        generation.produced += 1
        request.streamer.tokens(tokens)
        generation.unfinished &= ~torch.isin(tokens, torch.tensor(request.stops, dtype=torch.long))
        generation.last = tokens
        if generation.produced == request.max_new_tokens or not generation.unfinished.any():
            request.streamer.end()
            self._leave(generation, None)

    def _leave_cancelled(self) -> None:
        for generation in list(self._active):
            if generation.cancelled.is_set():
                cancelled = ExecutionCancelled(f"the generation was cancelled after {generation.produced} new token(s)")
                self._leave(generation, cancelled)

    def _leave(self, generation: _Generation, error: BaseException | None) -> None:
        """Frees its rows and settles its future: its tokens, or `error`."""
        if generation in self._active:
            self._active.remove(generation)
        with self._lock:
            self._free = sorted(self._free + generation.rows)
        generation.rows = []
        if error is None:
            generation.future.set_result(generation.sequences)
        elif not generation.future.done():
            generation.future.set_exception(error)

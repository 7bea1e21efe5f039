"""tt.fit: the plain training loop over a compiled module (or any nn.Module)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import nn

from .errors import ArgumentValueError, InputMismatchError, InvalidArgumentError
from .observe.progress import progress_enabled

Batches = Iterable[Any] | Callable[[], Iterable[Any]]


def fit(
    module: nn.Module,
    batches: Batches,
    *,
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable[[Any, Any], torch.Tensor],
    epochs: int = 1,
) -> list[float]:
    """Trains `module` for `epochs` passes over `batches`; returns the mean loss of each epoch.

    Each batch is `(inputs, target)`: `inputs` a tensor or a tuple of the module's
    positional inputs. Per batch: zero the gradients, call the module, take
    `loss_fn(outputs, target)`, backward, `optimizer.step()`. `batches` is an iterable
    gone over once per epoch (a list, a DataLoader), a generator (one epoch only: it is
    used up), or a function returning a fresh iterable per epoch. The module is in
    training mode while it trains and goes back to the mode it was in. A progress bar
    shows on a terminal (TT_PROGRESS=0 hides it).
    """
    _check_arguments(module, batches, optimizer, loss_fn, epochs)
    was_training = module.training
    module.train()
    try:
        with _Progress(epochs) as progress:
            return [
                _epoch(module, _batches_of(batches, epoch), optimizer, loss_fn, progress) for epoch in range(epochs)
            ]
    finally:
        module.train(was_training)


def _epoch(module, batches: Iterable[Any], optimizer, loss_fn, progress: _Progress) -> float:
    total, count = 0.0, 0
    progress.start_epoch(_length(batches))
    for index, batch in enumerate(batches):
        inputs, target = _split(batch, index)
        optimizer.zero_grad()
        try:
            outputs = module(*inputs)
        except InputMismatchError as error:  # a compiled module takes the shapes it was compiled for
            raise InputMismatchError(
                f"tt.fit: batch {index}: {error} (a DataLoader's last batch is smaller unless drop_last=True)"
            ) from error
        loss = loss_fn(outputs, target)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise ArgumentValueError(
                f"tt.fit: loss_fn must return a tensor of one element, got {_describe(loss)} (batch {index})"
            )
        loss.backward()
        optimizer.step()
        total += loss.item()
        count += 1
        progress.advance(total / count)
    if count == 0:
        raise ArgumentValueError("tt.fit: batches gave no batch in an epoch; expected at least one")
    return total / count


def _batches_of(batches: Batches, epoch: int) -> Iterable[Any]:
    """The iterable of one epoch (a generator serves one epoch alone: _check_arguments)."""
    if callable(batches) and not isinstance(batches, Iterable):
        return batches()
    return batches


def _split(batch: Any, index: int) -> tuple[tuple, Any]:
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise ArgumentValueError(f"tt.fit: batch {index}: expected (inputs, target), got {_describe(batch)}")
    inputs, target = batch
    return (tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)), target


def _check_arguments(module, batches, optimizer, loss_fn, epochs) -> None:
    if not isinstance(module, nn.Module):
        raise InvalidArgumentError(
            f"tt.fit: expected an nn.Module (a compiled module) to train, got {_describe(module)}"
        )
    if not isinstance(batches, Iterable) and not callable(batches):
        raise InvalidArgumentError(
            f"tt.fit: batches: expected an iterable of (inputs, target) or a function returning one, "
            f"got {_describe(batches)}"
        )
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise InvalidArgumentError(f"tt.fit: optimizer: expected a torch.optim.Optimizer, got {_describe(optimizer)}")
    if not callable(loss_fn):
        raise InvalidArgumentError(
            f"tt.fit: loss_fn: expected a function (outputs, target) -> loss, got {_describe(loss_fn)}"
        )
    if isinstance(epochs, bool) or not isinstance(epochs, int):
        raise InvalidArgumentError(f"tt.fit: epochs: expected a positive int, got {_describe(epochs)} ({epochs!r})")
    if epochs < 1:
        raise ArgumentValueError(f"tt.fit: epochs: expected a positive int, got {epochs}")
    if isinstance(batches, Iterator) and epochs > 1:  # refused before the first step changes any weight
        raise ArgumentValueError(
            f"tt.fit: batches is an iterator (a generator), used up by the first of the {epochs} epochs; pass "
            "a list, a DataLoader or a function that returns a fresh iterable per epoch"
        )


def _length(batches: Iterable[Any]) -> int | None:
    try:
        return len(batches)  # type: ignore[arg-type]
    except TypeError:
        return None


def _describe(value: object) -> str:
    if inspect.isgenerator(value):
        return "a generator"
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return type(value).__name__


class _Progress:
    """A bar per epoch with the running mean loss, on a terminal only."""

    def __init__(self, epochs: int) -> None:
        self._epochs, self._epoch = epochs, 0
        self._bar = None
        self._task = None

    def __enter__(self) -> _Progress:
        if progress_enabled():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("[bold]tensortorrent[/] fit: {task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]}"),
                TimeElapsedColumn(),
            )
            self._bar.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()

    def start_epoch(self, total: int | None) -> None:
        self._epoch += 1
        if self._bar is not None:
            description = f"epoch {self._epoch}/{self._epochs}"
            self._task = self._bar.add_task(description, total=total, loss="-")

    def advance(self, mean_loss: float) -> None:
        if self._bar is not None:
            self._bar.update(self._task, advance=1, loss=f"{mean_loss:.4g}")

"""tt.fit: the training loop, its batches, its result and its errors."""

from __future__ import annotations

import copy
import importlib

import pytest
import torch
from torch import nn

import tensortorrent as tt

TRAIN = tt.CompileConfig(allow_training=True)


def regression(batches: int = 4):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    data = [(torch.randn(4, 8), torch.randn(4, 1)) for _ in range(batches)]
    return model, data


def eager_losses(model, data, epochs: int) -> list[float]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(epochs):
        total = 0.0
        for x, y in data:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.item()
        losses.append(total / len(data))
    return losses


def test_fit_returns_the_mean_loss_per_epoch_as_eager_training_does():
    model, data = regression()
    eager = copy.deepcopy(model)
    compiled = tt.compile(model, (data[0][0],), config=TRAIN, devices="cpu")
    optimizer = torch.optim.SGD(compiled.parameters(), lr=0.1)
    losses = tt.fit(compiled, data, optimizer=optimizer, loss_fn=nn.functional.mse_loss, epochs=3)
    expected = eager_losses(eager, data, 3)
    assert len(losses) == 3 and losses[-1] < losses[0]
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(expected), rtol=1e-4, atol=1e-6)
    assert not compiled.training, "fit puts the module back in the mode it was in"


def test_fit_takes_a_generator_of_input_tuples_and_a_function_per_epoch():
    model, data = regression()
    compiled = tt.compile(model, (data[0][0],), config=TRAIN, devices="cpu")
    optimizer = torch.optim.SGD(compiled.parameters(), lr=0.1)
    generated = (((x,), y) for x, y in data)  # ((inputs...), target)
    assert len(tt.fit(compiled, generated, optimizer=optimizer, loss_fn=nn.functional.mse_loss)) == 1
    before = [p.detach().clone() for p in compiled.parameters()]
    with pytest.raises(tt.ArgumentValueError, match="generator.*first of the 2 epochs"):
        tt.fit(compiled, iter(data), optimizer=optimizer, loss_fn=nn.functional.mse_loss, epochs=2)
    assert all(torch.equal(a, b) for a, b in zip(before, compiled.parameters())), "refused before any step"
    fresh = lambda: (batch for batch in data)  # noqa: E731 - a new generator per epoch
    assert len(tt.fit(compiled, fresh, optimizer=optimizer, loss_fn=nn.functional.mse_loss, epochs=2)) == 2


@pytest.mark.parametrize(
    ("epochs", "error"),
    [(0, tt.ArgumentValueError), (-1, tt.ArgumentValueError), (1.5, tt.InvalidArgumentError), (True, TypeError)],
)
def test_epochs_must_be_a_positive_int(epochs, error):
    model, data = regression(1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(error, match="epochs: expected a positive int"):
        tt.fit(model, data, optimizer=optimizer, loss_fn=nn.functional.mse_loss, epochs=epochs)


def test_bad_batches_and_losses_are_named():
    model, data = regression(1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(tt.ArgumentValueError, match=r"batch 0: expected \(inputs, target\)"):
        tt.fit(model, [data[0][0]], optimizer=optimizer, loss_fn=nn.functional.mse_loss)
    with pytest.raises(tt.ArgumentValueError, match=r"batch 0: expected \(inputs, target\), got a tuple of 3"):
        tt.fit(model, [(*data[0], data[0][1])], optimizer=optimizer, loss_fn=nn.functional.mse_loss)
    with pytest.raises(tt.ArgumentValueError, match="no batch"):
        tt.fit(model, [], optimizer=optimizer, loss_fn=nn.functional.mse_loss)
    with pytest.raises(tt.ArgumentValueError, match="one element"):
        tt.fit(model, data, optimizer=optimizer, loss_fn=lambda out, y: out - y)
    with pytest.raises(tt.InvalidArgumentError, match="torch.optim.Optimizer"):
        tt.fit(model, data, optimizer="adam", loss_fn=nn.functional.mse_loss)


def test_fit_on_a_module_compiled_for_inference_says_how_to_train():
    model, data = regression(1)
    compiled = tt.compile(model, (data[0][0],), devices="cpu")
    optimizer = torch.optim.SGD(compiled.parameters(), lr=0.1)
    with pytest.raises(tt.UnsupportedFeatureError, match="allow_training=True"):
        tt.fit(compiled, data, optimizer=optimizer, loss_fn=nn.functional.mse_loss)


def test_fit_shows_progress_on_a_terminal(monkeypatch, capsys):
    monkeypatch.setattr(importlib.import_module("tensortorrent.fit"), "progress_enabled", lambda: True)
    model, data = regression(2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    tt.fit(model, data, optimizer=optimizer, loss_fn=nn.functional.mse_loss, epochs=2)
    shown = capsys.readouterr()
    assert "epoch 2/2" in shown.out + shown.err


def test_a_batch_of_other_shapes_is_named_with_the_hint_a_dataloader_needs():
    model, data = regression()
    compiled = tt.compile(model, (data[0][0],), config=TRAIN, devices="cpu")
    optimizer = torch.optim.SGD(compiled.parameters(), lr=0.1)
    ragged = [*data, (data[0][0][:1], data[0][1][:1])]  # as a DataLoader's last batch
    with pytest.raises(tt.InputMismatchError, match=f"tt.fit: batch {len(data)}: .*drop_last=True"):
        tt.fit(compiled, ragged, optimizer=optimizer, loss_fn=nn.functional.mse_loss)

"""Opt-in training: gradients, optimizer steps and modes equal eager's on every plan."""

from __future__ import annotations

import copy

import pytest
import torch
import transformers
from e2e.test_peaks import simulated_peaks
from torch import nn

import tensortorrent as tt
from tensortorrent import _core
from tiny_transformers import MODELS, logits

TOLERANCE = dict(rtol=1e-4, atol=1e-5)
TRAIN = tt.CompileConfig(allow_training=True)


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.GELU(), nn.Linear(128, 32))

    def forward(self, x):
        return self.net(x)


class Branches(nn.Module):
    """Two branches from one input, joined, with a skip connection over both."""

    def __init__(self) -> None:
        super().__init__()
        self.left, self.right, self.out = nn.Linear(64, 64), nn.Linear(64, 64), nn.Linear(64, 64)

    def forward(self, x):
        return self.out(torch.relu(self.left(x)) + torch.tanh(self.right(x))) + x


class DropoutBlock(nn.Module):
    """A transformer encoder block (attention, MLP, both with dropout) and a head."""

    def __init__(self) -> None:
        super().__init__()
        self.block = nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, dropout=0.2, batch_first=True)
        self.head = nn.Linear(64, 8)

    def forward(self, x):
        return self.head(self.block(x))


class Normalized(nn.Module):
    """Batch norm in training mode: batch statistics, running statistics updated."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(64, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Linear(128, 32), nn.BatchNorm1d(32)
        )

    def forward(self, x):
        return self.net(x)


class Decoder(nn.Module):
    """A Hugging Face decoder from a small config, fed embeddings so the input has a gradient."""

    def __init__(self, name: str) -> None:
        super().__init__()
        cls, config = MODELS[name]
        self.model = cls(config())

    def forward(self, embeddings):
        return logits(self.model(inputs_embeds=embeddings))


def example(name: str, small: bool = False) -> tuple[nn.Module, torch.Tensor]:
    """A model and an input; `small`: few rows, so that what they save for backward leaves
    a small device room for some of the weights only."""
    torch.manual_seed(0)
    rows = 2 if small else 8
    if name in ("gpt2", "llama"):
        return Decoder(name), torch.randn(1 if small else 2, rows, 64)
    model = {"mlp": Mlp, "branches": Branches, "dropout": DropoutBlock, "batchnorm": Normalized}[name]()
    return model, torch.randn(1 if small else 4, rows, 64) if name == "dropout" else torch.randn(rows, 64)


def weight_bytes(model: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def compile_for_training(model: nn.Module, x: torch.Tensor, plan: str) -> tt.CompiledModule:
    """`plan`: "regions" (several regions on the CPU) or "streamed" (regions on a virtual
    device that cannot hold the weights: parameters copied there on every call)."""
    config = tt.CompileConfig(allow_training=True, max_region_nodes=3)
    if plan == "regions":
        return tt.compile(model, (x,), config=config, devices="cpu")
    memory = int(0.6 * weight_bytes(model))
    for _ in range(4):
        assert memory < weight_bytes(model), "the device must not hold every weight"
        try:
            return tt.compile(model, (x,), config=config, devices=["acc"], machine=virtual_device(memory))
        except tt.PlanningError as error:  # the plan needs more (saved activations): give the device that
            memory = int(error.needed_bytes * 1.05)
    raise AssertionError(f"no plan at {memory} bytes")


def virtual_device(memory_bytes: int) -> tt.VirtualDevice:
    return tt.VirtualDevice("acc", memory_bytes=memory_bytes, flops=1e12, link_bandwidth=1e10)


def parameter_copies(compiled: tt.CompiledModule) -> int:
    """Copies per call of the training program that read a model parameter (streamed ones)."""
    trainer = compiled._trainer
    plane = trainer._plane
    slot_of = dict(plane.plan.preset)
    parameters = {id(p) for p in compiled.parameters()}
    bound = trainer._runner.bound_values
    return sum(
        1
        for instruction in plane.plan.program.schedule.instructions
        if instruction.kind == _core.InstructionKind.Copy
        for buffer in instruction.reads
        if buffer in slot_of and slot_of[buffer] < len(bound) and id(bound[slot_of[buffer]]) in parameters
    )


def run_both(compiled, eager, x, seed: int = 1):
    """One forward and backward of each on the same seed; returns (compiled x, eager x)."""
    inputs = [x.clone().requires_grad_(), x.clone().requires_grad_()]
    for module, value in zip((compiled, eager), inputs):
        torch.manual_seed(seed)
        module(value).square().mean().backward()
    return inputs


def assert_same_gradients(compiled: tt.CompiledModule, eager: nn.Module) -> None:
    got, expected = dict(compiled.model.named_parameters()), dict(eager.named_parameters())
    assert got.keys() == expected.keys()
    for name, parameter in expected.items():
        if parameter.grad is None:  # unused by this forward (token embeddings fed embeddings)
            assert got[name].grad is None, f"{name}: eager gives it no gradient"
            continue
        assert got[name].grad is not None, f"{name}: no gradient reached it"
        torch.testing.assert_close(got[name].grad, parameter.grad, **TOLERANCE, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("plan", ["regions", "streamed"])
@pytest.mark.parametrize("name", ["mlp", "branches", "dropout", "batchnorm", "gpt2", "llama"])
def test_gradients_equal_eager(name, plan):
    model, x = example(name, small=plan == "streamed")
    eager = copy.deepcopy(model)
    compiled = compile_for_training(model, x, plan)
    if plan == "regions":
        assert compiled._trainer.region_count > 1
    else:
        assert set(compiled._trainer.region_devices) == {"acc"}
        assert parameter_copies(compiled) > 0, "the device cannot hold the weights: some must be copied per call"
    compiled.train()
    eager.train()
    mine, theirs = run_both(compiled, eager, x)
    assert_same_gradients(compiled, eager)
    torch.testing.assert_close(mine.grad, theirs.grad, **TOLERANCE)
    for name_, buffer in eager.named_buffers():  # batch norm's running statistics, updated as eager's
        torch.testing.assert_close(dict(compiled.model.named_buffers())[name_], buffer, **TOLERANCE)


def test_modes_switch_semantics_and_start_in_eval():
    model, x = example("batchnorm")
    compiled = tt.compile(model, (x,), config=TRAIN, devices="cpu")
    assert not compiled.training
    model.train()  # the caller's flags do not decide: the compiled module's mode does
    eager = copy.deepcopy(model).eval()
    out = compiled(x)
    assert not out.requires_grad
    torch.testing.assert_close(out, eager(x).detach())
    assert model.net[1].num_batches_tracked.item() == 0, "an eval call updates no statistics"
    compiled.train()
    assert compiled.training and model.training and model.net[1].training
    out = compiled(x)
    assert out.requires_grad and model.net[1].num_batches_tracked.item() == 1
    with torch.no_grad():  # training semantics, nothing recorded
        assert not compiled(x).requires_grad
    compiled.eval()
    assert not compiled.training and not model.net[1].training


@pytest.mark.parametrize("plan", ["regions", "streamed"])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_five_optimizer_steps_give_eager_weights(optimizer, plan):
    model, x = example("dropout", small=plan == "streamed")
    eager = copy.deepcopy(model)
    compiled = compile_for_training(model, x, plan)
    make = {
        "sgd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
        "adam": lambda p: torch.optim.Adam(p, lr=1e-2),
    }[optimizer]
    train_side_by_side(compiled, eager, x, make, steps=5)


def train_side_by_side(compiled, eager, x, make_optimizer, steps: int, tolerance=TOLERANCE) -> None:
    """`steps` optimizer steps of each (the same seed per step), then eval(): the weights
    and the outputs without grad equal the trained eager model's."""
    mine, theirs = make_optimizer(compiled.parameters()), make_optimizer(eager.parameters())
    compiled.train()
    eager.train()
    for step in range(steps):
        for module, optimizer in ((compiled, mine), (eager, theirs)):
            optimizer.zero_grad()
            torch.manual_seed(step)
            module(x).square().mean().backward()
            optimizer.step()
    trained = dict(compiled.model.named_parameters())
    for name, parameter in eager.named_parameters():
        torch.testing.assert_close(trained[name], parameter, **tolerance, msg=lambda m, name=name: f"{name}: {m}")
    compiled.eval()
    eager.eval()
    out = compiled(x)
    assert not out.requires_grad
    with torch.no_grad():
        torch.testing.assert_close(out, eager(x), **tolerance)


def test_the_briefs_example_as_written():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 4))
    x = torch.randn(8, 16)
    before = copy.deepcopy(model)

    config = tt.CompileConfig(allow_training=True)
    compiled = tt.compile(model, example_inputs=(x,), config=config)
    optimizer = torch.optim.Adam(compiled.parameters())
    compiled.train()
    optimizer.zero_grad()
    loss = compiled(x).sum()
    loss.backward()
    optimizer.step()
    compiled.eval()

    assert not torch.equal(model[0].weight, before[0].weight), "the step changed the model's weights"
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model.eval()(x))


def test_parameters_are_the_models_own():
    model, x = example("mlp")
    compiled = tt.compile(model, (x,), config=TRAIN, devices="cpu")
    assert [id(p) for p in compiled.parameters()] == [id(p) for p in model.parameters()]
    assert [n for n, _ in compiled.named_parameters()] == [f"model.{n}" for n, _ in model.named_parameters()]


@pytest.mark.parametrize("plan", ["regions", "streamed"])
def test_saved_activations_are_accounted_and_peaks_equal_the_simulation(plan):
    model, x = example("gpt2", small=True)
    compiled = compile_for_training(model, x, plan)
    trainer = compiled._trainer
    saved = [b for b in trainer._plane.plan.program.buffers if b.label.endswith("saved for backward")]
    assert sum(trainer._runner.saved_bytes) > 0 and len(saved) == sum(1 for n in trainer._runner.saved_bytes if n)
    assert {b.tier for b in saved} == {1 if plan == "streamed" else 0}, "on the tier of the region that saves them"
    compiled.train()
    compiled(x.clone().requires_grad_()).sum().backward()
    assert list(compiled.last_peak_bytes.values()) == simulated_peaks(compiled, trainer._plane.plan.program)
    training_peak = compiled.last_peak_bytes
    compiled.eval()
    compiled(x)
    tier = "acc" if plan == "streamed" else "ram"
    # The eval program's CPU regions may hold weights packed for oneDNN (runtime/packed_weights.py).
    packed = sum(c.held_bytes for c in compiled._backends.choices) if tier == "ram" else 0
    assert training_peak[tier] > compiled.last_peak_bytes[tier] - packed, "an eval call saves nothing for backward"
    text = compiled.explain()
    assert "Training program" in text and "saved for backward" in text


def test_train_without_allow_training_says_how():
    model, x = example("mlp")
    compiled = tt.compile(model, (x,), devices="cpu")
    model.eval()
    with pytest.raises(tt.UnsupportedFeatureError, match=r"allow_training=True"):
        compiled.train()
    assert not compiled.training and not model.training, "a refused train() changes no mode"
    compiled.eval()  # always allowed


def test_limits_name_both_features(tmp_path):
    model, x = example("mlp")
    with pytest.raises(tt.UnsupportedFeatureError, match="activation_budget_bytes") as caught:
        tt.compile(model, (x,), config=tt.CompileConfig(allow_training=True, activation_budget_bytes=4096))
    assert caught.value.features[0].startswith("training")
    budget = weight_bytes(model) // 2
    config = tt.CompileConfig(allow_training=True, ram_budget_bytes=budget, spill_dir=str(tmp_path))
    with pytest.raises(tt.UnsupportedFeatureError, match="streamed from disk"):
        tt.compile(model, (x,), config=config)
    exported = torch.export.export(model.eval(), (x,))
    with pytest.raises(tt.UnsupportedFeatureError, match="exported program"):
        tt.compile(exported, (x,), config=TRAIN)
    with pytest.raises(tt.UnsupportedFeatureError, match="checkpoint"):
        tt.compile(model, (x,), config=TRAIN, checkpoint=tmp_path / "weights.safetensors")


def test_saving_a_training_module_saves_its_current_weights(tmp_path):
    model, x = example("batchnorm")
    compiled = tt.compile(model, (x,), config=TRAIN, devices="cpu")
    optimizer = torch.optim.SGD(compiled.parameters(), lr=0.1)
    compiled.train()
    compiled(x).square().mean().backward()
    optimizer.step()
    compiled.eval()
    loaded = tt.load_compiled(compiled.save(tmp_path / "trained"))
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model.eval()(x))
    with pytest.raises(tt.UnsupportedFeatureError, match="loaded from an artifact"):
        loaded.train()


def test_dropout_leaves_the_callers_seed_alone_while_compiling():
    model, x = example("dropout")
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    tt.compile(model, (x,), config=TRAIN, devices="cpu")
    assert torch.equal(torch.rand(3), expected)


def test_gpt2_with_dropout_trains_like_eager_over_ids():
    torch.manual_seed(0)
    config = MODELS["gpt2"][1]()
    model = transformers.GPT2LMHeadModel(config)
    eager = copy.deepcopy(model)
    ids = torch.randint(0, config.vocab_size, (2, 12))
    compiled = tt.compile(model, (ids,), config=TRAIN, devices="cpu")
    compiled.train()
    eager.train()
    for module in (compiled, eager):
        torch.manual_seed(3)
        logits(module(ids)).logsumexp(-1).mean().backward()
    assert_same_gradients(compiled, eager)


def test_split_layers_train_like_eager():
    from e2e.test_layer_split import small_device, stack

    torch.manual_seed(0)
    model = stack().train()
    eager = copy.deepcopy(model)
    x = torch.randn(1, 1024)
    # A training step's split wins by less than an inference call's (about 1.4x here), so a
    # busy moment during one timing can tip the plan: the link's speed is tried around the
    # balance point until the planner splits, which is the plan this test is about.
    for speedup in (1.0, 1.5, 2.0, 0.7):
        compiled = tt.compile(model, (x,), config=TRAIN, devices=["cpu", "acc"], machine=small_device(speedup))
        if compiled._trainer._plan.placement.chosen.splits:
            break
    assert compiled._trainer._plan.placement.chosen.splits, "at batch 1 the layers are split between cpu and acc"
    compiled.train()
    mine, theirs = run_both(compiled, eager, x)
    assert_same_gradients(compiled, eager)
    torch.testing.assert_close(mine.grad, theirs.grad, **TOLERANCE)


def test_gradients_cross_peer_links_and_ram_back_to_where_values_came_from():
    from e2e.test_peer_devices import device
    from e2e.test_virtual_devices import BATCH, WIDTH, Stack

    torch.manual_seed(0)
    model = Stack()
    eager = copy.deepcopy(model)
    x = torch.randn(BATCH, WIDTH)
    machine = [device("a", 4, peers={"b": 1e9}), device("b", 4), device("c", 4)]
    compiled = tt.compile(model, (x,), config=TRAIN, devices=["a", "b", "c"], machine=machine)
    assert set(compiled._trainer.region_devices) == {"a", "b", "c"}
    compiled.train()
    mine, theirs = run_both(compiled, eager, x)
    links = {r.device for r in compiled.last_report.records if r.kind == "copy"}
    assert {"a->b", "b.d2h", "c.h2d"} <= links
    assert_same_gradients(compiled, eager)
    torch.testing.assert_close(mine.grad, theirs.grad, **TOLERANCE)


def test_composed_modules_train_like_eager():
    torch.manual_seed(0)
    first, second = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.2)), nn.Sequential(nn.Linear(16, 4), nn.BatchNorm1d(4))
    eager = nn.Sequential(copy.deepcopy(first), copy.deepcopy(second)).train()
    x = torch.randn(6, 8)
    compiled = tt.compile_modules([first, second], (x,), config=TRAIN, devices="cpu")
    compiled.train()
    mine, theirs = run_both(compiled, eager, x)
    for got, expected in zip([*first.parameters(), *second.parameters()], eager.parameters()):
        torch.testing.assert_close(got.grad, expected.grad, **TOLERANCE)
    torch.testing.assert_close(mine.grad, theirs.grad, **TOLERANCE)

"""torch.export of a user's model under eval-mode (or training-mode) semantics, with clear errors."""

from __future__ import annotations

import contextlib
import logging
import operator
import warnings
from collections.abc import Iterator

import torch
from torch import nn
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from ..errors import CaptureError, InvalidArgumentError, UnsupportedError

log = logging.getLogger(__name__)


@contextlib.contextmanager
def eval_mode(model: nn.Module, training: bool = False) -> Iterator[None]:
    """Puts every submodule in eval mode (training mode with `training`), then restores
    each one's own training flag."""
    modes = [(module, module.training) for module in model.modules()]
    model.train(training)
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training


def check_model(model: object) -> nn.Module:
    """The model itself, or InvalidArgumentError when it is not an nn.Module."""
    if not isinstance(model, nn.Module):
        raise InvalidArgumentError(
            f"tt.compile: expected a torch.nn.Module, got {type(model).__module__}.{type(model).__qualname__}"
        )
    return model


def capture_model(model: nn.Module, args: tuple, kwargs: dict, training: bool = False) -> torch.export.ExportedProgram:
    """Exports `model` at the example inputs and functionalizes the graph.

    Functionalization rewrites in-place ops as pure ones, so that regions never mutate a
    value another region reads and may run concurrently. Eval mode gives inference
    semantics (BatchNorm uses running stats, Dropout is the identity); `training` captures
    training semantics instead (dropout's random masks, batch statistics and the running
    statistics' updates as buffer mutations), with grad enabled so that the graph keeps
    what autograd differentiates. The caller's training flags are restored afterwards,
    whatever happens.
    """
    with eval_mode(model, training), torch.set_grad_enabled(training):
        try:
            exported = torch.export.export(model, args, kwargs)
        except Exception as error:  # export raises many types; all mean "cannot capture"
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise CaptureError(
                f"torch.export could not capture {type(model).__qualname__}: {type(error).__name__}: {reason}"
            ) from error
    return functional_program(exported)


# Operations whose flag (at that argument) says they run as in training: dropout's masks,
# batch norm's batch statistics.
_TRAINING_FLAGS = {
    torch.ops.aten.dropout.default: 2,
    torch.ops.aten.feature_dropout.default: 2,
    torch.ops.aten.alpha_dropout.default: 2,
    torch.ops.aten.feature_alpha_dropout.default: 2,
    torch.ops.aten.native_dropout.default: 2,
    torch.ops.aten.batch_norm.default: 5,
}


def check_eval_semantics(exported: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """`exported` itself; UnsupportedError where it was exported in training mode (a
    compiled module has eval semantics, and a program holds no model to switch)."""
    for node in exported.graph.nodes:
        flag = _TRAINING_FLAGS.get(node.target)
        if flag is not None and len(node.args) > flag and node.args[flag] is True:
            raise UnsupportedError(
                f"the exported program runs {node.target.name()} in training mode ({node.name}); export the "
                "model in eval mode (model.eval() before torch.export.export)"
            )
    return exported


def functional_program(exported: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """The program with in-place ops rewritten as pure ones and without dead nodes."""
    with torch.no_grad(), warnings.catch_warnings():
        # torch's own deepcopy of the pytree specs warns about its deprecated LeafSpec.
        warnings.simplefilter("ignore", FutureWarning)
        functional = exported.run_decompositions({})
    drop_dead_nodes(functional.graph_module)
    check_static_shapes(functional.graph_module)
    return functional


def check_static_shapes(graph_module: torch.fx.GraphModule) -> None:
    """UnsupportedError where a value's shape is not a number at capture: it depends on the
    input's values (x[x > 0], nonzero), and the planner sizes every buffer in advance."""
    for node in graph_module.graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor) and not all(isinstance(d, int) for d in value.shape):
            if not free_unbacked_symbols(value):  # a dimension export was told is dynamic (dynamic_shapes)
                raise UnsupportedError(
                    f"{node.name} has shape {tuple(value.shape)}, with a dynamic dimension: TensorTorrent plans "
                    "static shapes only; export without dynamic_shapes (or pass the model itself)"
                )
            origin = node.meta.get("stack_trace", "").strip().splitlines()[-1:] or [str(node.target)]
            raise UnsupportedError(
                f"{node.name} has shape {tuple(value.shape)}, which depends on the input's values "
                f"(from {origin[0].strip()}): TensorTorrent plans static shapes only; "
                "compute the data-dependent part outside the compiled module"
            )


def drop_dead_nodes(graph_module: torch.fx.GraphModule) -> None:
    """Removes operations whose results nothing needs: export's metadata asserts and the
    getitem nodes that loading a saved program adds for unused outputs.

    Shapes are static and every call's inputs are checked against the compiled dtypes and
    devices first, so the dtype/device asserts export leaves on intermediate tensors cannot
    fail; each would still cost an op dispatch on every call (24 in a 4-layer Llama).
    Dropping unused getitems keeps a loaded program's operations identical to the saved one.
    """
    graph = graph_module.graph
    for node in reversed(list(graph.nodes)):
        if node.op == "call_function" and not node.users and node.target in (_ASSERT_METADATA, operator.getitem):
            graph.erase_node(node)
    graph_module.recompile()


def with_tensors(
    exported: torch.export.ExportedProgram, state_dict: dict, constants: dict
) -> torch.export.ExportedProgram:
    """The same program over other tensors (and without example inputs, which torch pickles)."""
    return torch.export.ExportedProgram(
        root=exported.graph_module,
        graph=exported.graph,
        graph_signature=exported.graph_signature,
        state_dict=state_dict,
        range_constraints=exported.range_constraints,
        module_call_graph=exported.module_call_graph,
        example_inputs=None,
        constants=constants,
        verifiers=[exported.verifier],
    )


def meta_like(value: torch.Tensor) -> torch.Tensor:
    """A tensor of `value`'s shape, strides and dtype holding no data (a Parameter stays one)."""
    meta = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    return nn.Parameter(meta, value.requires_grad) if isinstance(value, nn.Parameter) else meta


# Looked up softly: older torch releases do not emit (or define) this op.
_ASSERT_METADATA = getattr(getattr(torch.ops.aten, "_assert_tensor_metadata", None), "default", None)

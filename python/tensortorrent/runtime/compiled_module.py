"""CompiledModule: the nn.Module that tt.compile returns."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import nn

from .. import core
from ..artifact.save import save_compiled
from ..capture.program import NormalizedProgram
from ..capture.signature import InputSignature
from ..compression import weight_format_summary
from ..compression.model import formats_computed
from ..config import CompileConfig
from ..errors import (
    ExecutionCancelled,
    ModuleClosedError,
    TensorTorrentError,
    UnsupportedFeatureError,
)
from ..files import write_text_atomically
from ..observe.explain import explain, training_lines
from ..observe.plan_page import write_plan_page
from ..observe.plan_page_data import PlanSources
from ..partition import Region
from ..planning import ExecutionPlan
from ..planning.costs import RegionCost, measure_cpu_seconds, region_costs
from ..planning.plan import usable_cores
from ..planning.profile_cache import PROFILES
from ..planning.weights_on_disk import WeightsOnDisk
from .call_handle import CallHandle
from .call_threads import on_a_call_thread, running_a_call
from .device_direct import DeviceDirect
from .device_kernels import describe_device_kernels
from .executable import Executable
from .heap_retention import retain_heap_for
from .held_weights import bring_back
from .program_runner import detach_outputs
from .region_backends import RegionBackends


@dataclass(frozen=True)
class ArtifactParts:
    """Everything compiled.save() writes, as public values."""

    program: NormalizedProgram
    signature: InputSignature
    plan: ExecutionPlan
    model_name: str
    config: CompileConfig
    regions: tuple[Region, ...]
    region_costs: tuple[RegionCost, ...]
    weights_on_disk: WeightsOnDisk | None  # where the bytes of bound tensors on the meta device are
    region_backends: RegionBackends  # what each region runs (eager, or inductor's code: compiled again on load)
    accuracy_note: str | None  # compressed weights against the float ones, measured at compile


class CompiledModule(nn.Module):
    """Runs a compiled plan; called like the original model, it returns the same outputs.

    Calls are thread-safe: each call has its own environment and they share the region
    kernels, the schedule and the executor's workers. The original model stays attached
    (as `.model`), and its parameters are used in place, not copied.

    It starts in eval mode. Compiled with CompileConfig(allow_training=True), train()
    switches its calls to the program captured in training mode, run with autograd
    whenever grad is enabled: gradients reach the model's parameters (`parameters()`),
    so any optimizer trains them, and eval() switches back.
    """

    def __init__(
        self,
        *,
        model: nn.Module,
        model_name: str,
        signature: InputSignature,
        config: CompileConfig,
        executable: Executable,
    ) -> None:
        """`model` holds the weights (the program's bound tensors, in place); where the
        executable says it may, its own forward is the export-free direct path.
        `executable` is what runs (runtime/executable.py), decided by the build."""
        super().__init__()
        self.model = model
        # The same model outside nn.Module's registry, for the direct path: reaching a
        # submodule through nn.Module.__getattr__ costs ~0.6 us per call.
        object.__setattr__(self, "_model_forward", model)
        self._runs_model_forward = executable.runs_model_forward
        self._model_name = model_name
        self._signature = signature
        self._program = executable.program
        self._regions = regions = executable.regions
        self._plan = executable.plan
        self._config = config
        self._backends = executable.backends
        self._runner = executable.runner
        # What explain() says of the numerics check (tt.compile sets it after the check ran),
        # and of compressed weights' accuracy (measured by tt.compile with weight_format).
        self.numerics_note: str | None = None
        self.accuracy_note: str | None = None
        self._streams = executable.streams
        self._on_device: DeviceDirect | None = executable.on_device
        self._plane = executable.plane
        retain_heap_for(self._runner)
        # Weights streamed from disk are read from a copy there: the version of each
        # parameter when compiled, so that a call refuses weights changed since.
        self._compiled_versions = [(p, p._version) for p in model.parameters()] if self._streams else []
        self._origin = executable.origin
        self._predicted_s = executable.predicted_s
        self._costs = region_costs(regions, executable.cpu_seconds)
        # Each call has its own cancel token; request_cancel() reaches the calls running now.
        # A set's add, discard and copy are atomic (the GIL; a lock per object in
        # free-threaded builds), so calls share it without a lock of their own.
        self._in_flight: set[core.CancelToken] = set()
        self._submit_pool_lock = threading.Lock()
        # Calls that write buffers back into the model's shared tensors run one at a time.
        self._mutation_lock = threading.Lock() if self._runner.mutations else None
        # The model's buffers its calls update in RAM: a device's newer copy of one comes back first.
        plane = self._plane
        self._read_in_ram = plane.read_in_ram() if plane is not None else [b for _, b in self._runner.mutations]
        self._submit_pool: ThreadPoolExecutor | None = None
        self._submodules = tuple(model.modules())
        # A plain list, not an attribute: nn.Module.__setattr__ costs microseconds per call.
        # Its one item, replaced atomically by the last call to finish (whichever thread ran
        # it), is a RunReport, the duration of a direct-path call in microseconds, or None.
        self._last_report: list[core.RunReport | float | None] = [None]
        self._last_peaks: dict[str, int] = {}
        self._trainer: CompiledModule | None = None  # the training-mode program (attach_training)
        self._closed = False
        self._release_lock = threading.Lock()
        self._released = False
        self.training = False  # calls have eval semantics until train()

    def attach_training(self, trainer: CompiledModule) -> None:
        """Sets the program train() switches to: one compiled from the same model captured
        in training mode (build.py: training_twin)."""
        # Not a submodule: its parameters are this module's, and it is no part of the state.
        object.__setattr__(self, "_trainer", trainer)

    def train(self, mode: bool = True) -> CompiledModule:
        """Training semantics for later calls (and for the model, as nn.Module.train);
        only for a module compiled with CompileConfig(allow_training=True)."""
        if mode and self._trainer is None:
            if self._config.allow_training:  # a loaded artifact holds the inference program alone
                raise UnsupportedFeatureError(
                    "training", "a module loaded from an artifact", "compile the model with tt.compile to train it"
                )
            raise UnsupportedFeatureError(
                "train()",
                "a module compiled for inference",
                "compile with tt.CompileConfig(allow_training=True) to train it",
            )
        super().train(mode)  # the eval program's next call copies again the weights the steps changed
        return self

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(args, kwargs, core.CancelToken())[0]

    def submit(self, *args: Any, **kwargs: Any) -> CallHandle:
        """Starts a call on a background thread and returns its handle at once: the handle
        gives the result, cancels this call alone, and keeps this call's own report."""
        token = core.CancelToken()
        with self._submit_pool_lock:
            if self._submit_pool is None:
                self._submit_pool = ThreadPoolExecutor(
                    max_workers=usable_cores(), thread_name_prefix="tensortorrent-call"
                )
            pool = self._submit_pool
        return CallHandle(pool.submit(self._call, args, kwargs, token), token, self.report_of)

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> CompiledModule:
        """What .to(), .half(), .cuda() and the like apply to every tensor: refused where it
        would change a tensor's dtype or device, which the program was planned and
        compiled for (and which would convert the user's own model, whose tensors these
        are); applied as on any module otherwise."""
        for tensor in (*self.parameters(), *self.buffers()):
            probe = fn(torch.empty(0, dtype=tensor.dtype, device=tensor.device))
            if probe.dtype != tensor.dtype or probe.device != tensor.device:
                raise UnsupportedFeatureError(
                    f"changing a compiled module's tensors from {tensor.dtype} on {tensor.device} to {probe.dtype} "
                    f"on {probe.device}",
                    "the program planned and compiled for them",
                    "convert or move the model, then compile it again (tt.compile places it on devices itself)",
                )
        return super()._apply(fn, recurse)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        """As on any module, copying into the tensors the program computes from; the
        model's own keys ("0.weight") are taken as well as this module's ("model.0.weight").
        Refused where the weights stream from disk (calls read them from a copy there,
        which new weights would not change) and with assign=True (new tensors, which the
        program was not compiled over)."""
        if self._streams:
            raise self._streamed_weights_fixed("load_state_dict()")
        if assign:
            raise UnsupportedFeatureError(
                "load_state_dict(assign=True)",
                "a compiled program (it computes from the tensors it was compiled over)",
                "load with assign=False, which copies into them",
            )
        if state_dict and not any(key.startswith("model.") for key in state_dict):
            return self.model.load_state_dict(state_dict, strict=strict)
        return super().load_state_dict(state_dict, strict=strict)

    def _streamed_weights_fixed(self, change: str) -> UnsupportedFeatureError:
        return UnsupportedFeatureError(
            change,
            "weights streamed from disk (a RAM budget below the weights: calls read them from a copy there)",
            "load the new weights into the model and compile it again",
        )

    def _weights_as_compiled(self) -> None:
        """Refuses a call on streamed weights changed in place since compiling; copies again
        the weights held on devices whose tensors in RAM changed (load_state_dict, an
        in-place edit), so that new weights change the outputs there too."""
        for parameter, version in self._compiled_versions:
            if parameter._version != version:
                raise self._streamed_weights_fixed("changing a parameter in place after compiling")
        if self._read_in_ram:  # a buffer another program writes on a device comes back first
            bring_back(self._read_in_ram)
        for holder in (self._plane, self._on_device):
            if holder is not None:
                holder.held.refresh()

    def _call(self, args: tuple, kwargs: dict, token: core.CancelToken) -> tuple[Any, core.RunReport | float]:
        """Runs one call under its own cancel token; returns its outputs and its report."""
        flat = self._signature.flatten(args, kwargs)
        if not self.training:
            self._weights_as_compiled()
        # In training mode the training program runs, recorded by autograd where grad is on.
        engine = self._trainer if self.training and self._trainer is not None else self
        grad = self.training and torch.is_grad_enabled()
        self._in_flight.add(token)
        try:
            with running_a_call:
                return self._call_in_flight(flat, args, kwargs, token, engine, grad)
        finally:
            self._in_flight.discard(token)
            if self._closed and not self._in_flight:  # close() asked from inside a call leaves it to the last
                self._release()

    def _call_in_flight(self, flat, args, kwargs, token, engine, grad) -> tuple[Any, core.RunReport | float]:
        # Checked once the call counts as in flight: close() sets the flag before it
        # waits for those, so either it waits for this call or this call sees the flag.
        if self._closed:
            raise ModuleClosedError(f"this compiled {self._model_name} was closed (close()); compile or load it again")
        if engine._mutation_lock is None:
            outputs, report, peaks = engine._dispatch(flat, args, kwargs, token, grad)
        else:
            with engine._mutation_lock:
                outputs, report, peaks = engine._dispatch(flat, args, kwargs, token, grad)
        self._last_report[0] = report
        if peaks is not None:
            self._last_peaks = peaks
        return outputs, report

    def _dispatch(self, flat: list[Any], args: tuple, kwargs: dict, token: core.CancelToken, grad: bool):
        """Runs the call on this module's program: (outputs, report, per-tier peaks or None)."""
        if self._plane is not None:
            timeout = self._plan.stall_timeout_s
            outputs, report, peaks = self._plane.run(flat, token, timeout, timeout_s=timeout, grad=grad)
            return outputs, report, dict(zip(self._plane.tier_names, peaks))
        return *self._call_direct(flat, args, kwargs, token, grad), None

    def _call_direct(self, flat: list[Any], args: tuple, kwargs: dict, token: core.CancelToken, grad: bool):
        if token.consume():
            raise ExecutionCancelled("call cancelled before its first region")
        start = time.perf_counter()
        if grad:  # autograd records the captured regions (the direct path of the training program)
            with torch.enable_grad():
                outputs = self._runner.run_inline(flat, grad=True)
            return outputs, (time.perf_counter() - start) * 1e6
        if self._on_device is not None:
            return self._on_device.run(flat), (time.perf_counter() - start) * 1e6
        if torch.is_grad_enabled():
            with torch.no_grad():
                outputs = self._run_inline(flat, args, kwargs)
        else:  # entering no_grad again would cost more than a small model's call
            outputs = self._run_inline(flat, args, kwargs)
        # Only the duration is kept; the report is built if someone asks for it.
        return outputs, (time.perf_counter() - start) * 1e6

    def _run_inline(self, flat: list[Any], args: tuple, kwargs: dict) -> Any:
        """The one resident CPU region, on the calling thread, without grad."""
        if not self._runs_model_forward or any(module.training for module in self._submodules):
            # No model code to call (a loaded artifact), or the model's own forward
            # would not have eval semantics now: run the captured region.
            return self._runner.run_inline(flat)
        # Export-free: the model's own forward is the fastest run of a one-region,
        # resident CPU plan, keeping eager's fused kernels (such as the fast path
        # of nn.TransformerEncoderLayer) that the captured graph spells out.
        return detach_outputs(self._model_forward(*args, **kwargs))

    def _direct_report(self, elapsed_us: float) -> core.RunReport:
        records = [
            core.InstructionRecord(
                id=instruction.id,
                label=instruction.label,
                kind="compute",
                device=instruction.device,
                worker=0,
                start_us=0.0,
                end_us=elapsed_us,
                ran=True,
                predicted_start_us=instruction.predicted_start_us,
                predicted_end_us=instruction.predicted_end_us,
            )
            for instruction in self._plan.schedule.instructions
            if instruction.kind == core.InstructionKind.Compute
        ]
        return core.RunReport(records=records, wall_us=elapsed_us, workers=1)

    def close(self) -> None:
        """Releases the program now rather than when the module is collected: the calls
        running are cancelled and waited for, then the data plane's arenas, worker and I/O
        threads, spill files and page-locked ranges go, with the weights held on devices
        and the submit() threads. Later calls raise tt.ModuleClosedError. Idempotent;
        `with tt.compile(...) as compiled:` closes on leaving the block."""
        if self._closed:
            return
        self._closed = True
        self.request_cancel()
        if self._in_flight and on_a_call_thread():
            return  # a hook inside a call: the last call to end releases (_call)
        while self._in_flight:  # calls end at their next instruction, or a direct call at its end
            time.sleep(0.001)
        self._release()

    def _release(self) -> None:
        """Lets go of the program once no call runs (once; a second caller waits for the first)."""
        with self._release_lock:
            if self._released:
                return
            self._released = True
            with self._submit_pool_lock:
                pool, self._submit_pool = self._submit_pool, None
            if pool is not None:
                pool.shutdown(wait=not on_a_call_thread())  # a submit() worker cannot wait for itself
            if self._plane is not None:
                self._plane.close()
            self._on_device = None  # its device copies of the weights and its recorded graphs
            if self._trainer is not None:
                self._trainer.close()

    def __enter__(self) -> CompiledModule:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request_cancel(self) -> None:
        """Makes every call running at this moment raise ExecutionCancelled before its next
        region; calls that start later are not affected."""
        for token in self._in_flight.copy():
            token.request()

    @property
    def last_report(self) -> core.RunReport | None:
        """Per-instruction telemetry of the most recent call that finished (None before any)."""
        return self.report_of(self._last_report[0])

    def report_of(self, report: core.RunReport | float | None) -> core.RunReport | None:
        """A call's report: a direct-path call keeps only its duration until asked."""
        return self._direct_report(report) if isinstance(report, float) else report

    @property
    def region_devices(self) -> list[str]:
        """The device each region computes on, in region order."""
        return list(self._plan.devices)

    @property
    def in_place_tiers(self) -> dict[str, int]:
        """Where the buffers its calls write in place (a KV cache) are: tier name ("ram", or
        the device holding them for good) -> their bytes there."""
        homes = self._plane.plan.homes if self._plane is not None else {}
        tiers: dict[str, int] = {}
        for written in self._runner.in_place.values():
            name = self._plane.plan.program.tiers[homes[written]].name if written in homes else "ram"
            tiers[name] = tiers.get(name, 0) + self._runner.slot_bytes[written]
        return tiers

    @property
    def last_peak_bytes(self) -> dict[str, int]:
        """Per memory tier ("ram", then each virtual device), the most bytes the last call held
        there: the residents plus the most of its own bytes live at once, counted as the
        simulator counts them. Empty on the direct path."""
        return dict(self._last_peaks)

    @property
    def streams_weights(self) -> bool:
        """Whether calls read weights from disk (a RAM budget below the weights)."""
        return self._streams

    @property
    def streamed_ram_bytes(self) -> tuple[int, int, int]:
        """A streamed program's RAM budget; the RAM its plan needs at most (the core's
        arena and torch's tensors: what it holds, its working set, the model's tensors it
        binds); and the bytes its reads keep in flight to read at the disk's measured speed."""
        plane = self._plane
        return plane.plan.budget_bytes, plane.plan.program.memory_plan.arena_bytes[0], plane.read_window_bytes

    @property
    def resident_weight_slots(self) -> frozenset[int]:
        """The bound slots (see artifact_parts().program.bound) of the weights a streamed
        program read from disk once and holds for good; empty where nothing streams."""
        if self._plane is None or self._plane.weights is None:
            return frozenset()
        return frozenset(self._plane.plan.resident)

    @property
    def uses_direct_path(self) -> bool:
        return self._plan.direct and not self._streams

    @property
    def input_signature(self) -> InputSignature:
        """What a call must pass: the structure, shapes and dtypes compiled for."""
        return self._signature

    def output_leaves(self) -> list[tuple[str, tuple[torch.dtype, tuple[int, ...]] | None]]:
        """Each flat output's path in the output structure (as pytree names it, such as
        "[0]" or ".logits") and its (dtype, shape), or None where it is not one tensor of
        static shape (a constant, say)."""
        runner = self._runner
        positions = pytree.tree_unflatten(list(range(len(runner.outputs))), runner.out_spec)
        paths = [pytree.keystr(path) for path, _ in pytree.tree_flatten_with_path(positions)[0]]
        return [
            (path, runner.slot_meta[slot] if slot is not None else None)
            for path, (slot, _) in zip(paths, runner.outputs)
        ]

    @property
    def predicted_s(self) -> float | None:
        """The simulated duration of one call; None where the plan was not simulated (a
        replayed or unplaced CPU plan)."""
        return self._predicted_s

    @property
    def region_count(self) -> int:
        return len(self._runner.kernels)

    def explain(self) -> str:
        """A readable report: regions, schedule and why the direct path was or was not taken
        (and, compiled with allow_training, the training program)."""
        text = self._explain()
        if self._trainer is None:
            return text
        trainer = self._trainer
        plane = trainer._plane
        program = plane.plan.program if plane is not None else None
        tiers = plane.tier_names if plane is not None else []
        placement = trainer._plan.placement
        machine = placement.machine.devices if placement is not None else ()
        apart = [d.name for d in machine if d.own_memory and d.name in trainer.region_devices]
        lines = training_lines(trainer.region_devices, trainer._runner.saved_bytes, program, tiers, apart)
        return "\n".join([text, "", *lines])

    def _explain(self) -> str:
        signature, program = self._signature.describe(), self._program
        return explain(
            self._model_name,
            signature,
            program,
            self._regions,
            self._plan,
            self._config,
            self._costs,
            self._origin,
            self._plane.describe() if self._plane is not None else (),
            self._direct_reason(),
            self._backends.describe()
            + describe_device_kernels([kernel.on_devices for kernel in self._runner.kernels])
            + ([f"Numerics: {self.numerics_note}"] if self.numerics_note else [])
            + ([f"Weights: {compressed}"] if (compressed := weight_format_summary(program.bound)) else [])
            + ([f"  accuracy {self.accuracy_note}"] if self.accuracy_note else []),
            [formats_computed(region.nodes) for region in self._regions],
        )

    def _direct_reason(self) -> str | None:
        """What explain() says of the direct path where the plan's own reason is not the whole story."""
        if self._streams:
            return "not taken: weights stream from disk through the data plane"
        return f"taken: {self._on_device.describe()}" if self._on_device is not None else None

    def profile(self, *args: Any, **kwargs: Any) -> list[float]:
        """Measures each region's CPU time on these inputs (the median of three timed runs after a warm-up),
        keeps it for explain() and saved artifacts, and returns it in seconds."""
        seconds = measure_cpu_seconds(self._runner, self._signature.flatten(args, kwargs))
        PROFILES.store([kernel.profile_key for kernel in self._runner.kernels], seconds)
        self._costs = region_costs(self._regions, seconds)
        return seconds

    @property
    def region_costs(self) -> list[RegionCost]:
        """Per region: FLOPs, output bytes and measured CPU seconds (None until profiled)."""
        return list(self._costs)

    def save(self, path: str | os.PathLike, weights: str = "copy") -> str:
        """Writes this compiled program as an artifact directory (see tt.load_compiled).
        `weights`: "copy" (the default) writes the weights into it; "reference", for weights
        read from files (a checkpoint), records those files and the tensors' places in them
        instead, and loading checks that they are still there, unchanged."""
        return save_compiled(self.artifact_parts(), path, weights)

    def export_pipeline(
        self,
        directory: str | os.PathLike,
        num_stages: int,
        n_microbatches: int | None = None,
        link_bytes_per_s: float | None = None,
        training: bool = False,
    ) -> str:
        """Writes this program as `num_stages` pipeline stages that torchrun runs, one
        process per stage, through torch.distributed.pipelining; returns the torchrun
        command (also written as DIR/torchrun.sh). The compiled shapes are one
        microbatch; a pipeline call takes `n_microbatches` (default: `num_stages`) of
        them. `training`: the training program's stages (allow_training=True), run
        with the 1F1B schedule and a loss on the last stage. See
        tensortorrent/pipeline/export.py."""
        # Imported here: the pipeline's export compiles each stage through tt.compile, which
        # builds compiled modules.
        from ..pipeline.export import export_pipeline

        return export_pipeline(self, directory, num_stages, n_microbatches, link_bytes_per_s, training)

    def run_recorded(self, *args: Any, **kwargs: Any) -> Any:
        """Runs the program inline on the calling thread with autograd recording it,
        whatever the mode: for a pipeline stage that trains (pipeline/runner.py), whose
        artifact holds a program captured in training mode."""
        flat = self._signature.flatten(args, kwargs)
        with torch.enable_grad():
            return self._runner.run_inline(flat, grad=True)

    def artifact_parts(self) -> ArtifactParts:
        """What an artifact of this module holds: the program, plan and their descriptions."""
        return ArtifactParts(
            program=self._program,
            signature=self._signature,
            plan=self._plan,
            model_name=self._model_name,
            config=self._config,
            regions=tuple(self._regions),
            region_costs=tuple(self._costs),
            weights_on_disk=self._plane.weights if self._plane is not None else None,
            region_backends=self._backends,
            accuracy_note=self.accuracy_note,
        )

    def trace(self, path: str | os.PathLike) -> str:
        """Writes the last call's telemetry as Chrome-trace JSON (Perfetto opens it); returns the path."""
        report = self.last_report
        if report is None:
            raise TensorTorrentError("trace: no call has finished yet; call the compiled module first")
        return write_text_atomically(path, report.chrome_trace_json(), "trace")

    def visualize(self, path: str | os.PathLike) -> str:
        """Writes one self-contained HTML page of the plan: the simulator's timeline per queue,
        the last call measured beside it, memory per tier over the call and the regions
        (observe/plan_page.py); returns the path."""
        program = self._plane.plan.program if self._plane is not None else None
        sources = PlanSources(self._model_name, self._plan, program, self._regions, self._costs)
        return write_plan_page(path, sources, self.last_report, self.last_peak_bytes)

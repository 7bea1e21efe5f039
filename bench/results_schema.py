"""Checks the results JSON of suites S1-S3 before tables and figures are made from it.

Hand-written, without a schema library, so `make test` needs nothing beyond the package.
It checks the envelope every suite shares and only the parts of each file that
bench/tables.py and bench/figures.py read: a field they read that is missing or of the
wrong type would otherwise become a KeyError, or worse, a wrong cell in the tables of docs/benchmarks.md.
`validate` raises ValueError naming the JSON path of the first problem (`$.a.b[2].c`).
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

# "skipped": a system left out with s1_fit.py --systems; like failed and missing, it says why.
STATUSES = ("ok", "failed", "missing", "skipped")
# The kinds a field may have; "?" after a kind also allows null.
KINDS = {
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
    "object": lambda v: isinstance(v, dict),
    "list": lambda v: isinstance(v, list),
}


def field(obj: dict, key: str, kind: str, path: str):
    """obj[key], after checking that it is present and of `kind`; `path` is obj's own path."""
    where = f"{path}.{key}"
    if key not in obj:
        raise ValueError(f"{where}: missing")
    value = obj[key]
    nullable = kind.endswith("?")
    if value is None and nullable:
        return None
    if not KINDS[kind.rstrip("?")](value):
        raise ValueError(f"{where}: expected {kind.rstrip('?')}{' or null' if nullable else ''}, got {value!r:.80}")
    return value


def fields(obj: dict, path: str, **kinds: str) -> None:
    for key, kind in kinds.items():
        field(obj, key, kind, path)


def items(values: list, kind: str, path: str) -> None:
    for index, value in enumerate(values):
        if not KINDS[kind](value):
            raise ValueError(f"{path}[{index}]: expected {kind}, got {value!r:.80}")


def envelope(data: dict) -> None:
    """What every results file records: its mode, when it ran, and on which machine."""
    if field(data, "mode", "str", "$") not in ("quick", "full"):
        raise ValueError(f"$.mode: expected 'quick' or 'full', got {data['mode']!r}")
    try:
        datetime.fromisoformat(field(data, "utc", "str", "$"))
    except ValueError:
        raise ValueError(f"$.utc: not an ISO 8601 time: {data['utc']!r}") from None
    machine = field(data, "machine", "object", "$")
    fields(
        machine, "$.machine", cpu_model="str", cores_usable="int", ram_gib="number", git_commit="str?", git_dirty="bool"
    )


def timing(obj: dict, path: str) -> None:
    fields(obj, path, median_us="number", min_us="number", max_us="number", calls_per_sample="int")
    items(field(obj, "samples_us", "list", path), "number", f"{path}.samples_us")


def s1_system(entry: dict, path: str) -> None:
    """One system's result on one workload: measured, or failed/missing with the reason."""
    status = field(entry, "status", "str", path)
    if status not in STATUSES:
        raise ValueError(f"{path}.status: expected one of {', '.join(STATUSES)}, got {status!r}")
    if status != "ok":
        if not field(entry, "error", "str", path).strip():
            raise ValueError(f"{path}.error: empty: a system {status} must say why")
        return
    timing(field(entry, "timing", "object", path), f"{path}.timing")
    # Results from before paired ratios were recorded have none: their tables show medians only.
    for reference, ratio in (field(entry, "paired_ratios", "object", path) if "paired_ratios" in entry else {}).items():
        fields(ratio, f"{path}.paired_ratios.{reference}", median="number", low="number", high="number")
    fields(
        entry,
        path,
        ratio_to_eager="number",
        max_abs_error="number",
        cosine="number?",
        argmax_agreement="number?",
        build_s="number?",
        notes="str?",
    )


def s1(data: dict) -> None:
    versions = field(data, "versions", "object", "$")
    for name in ("torch", "tensortorrent", "transformers", "onnxruntime", "onnx"):
        field(versions, name, "str?", "$.versions")
    field(data, "torch_threads", "int", "$")
    fields(field(data, "settings", "object", "$"), "$.settings", runs="int", sample_ms="number", warmup_ms="number")
    workloads = field(data, "workloads", "object", "$")
    if not workloads:
        raise ValueError("$.workloads: empty")
    for name, workload in workloads.items():
        path = f"$.workloads.{name}"
        if not isinstance(workload, dict):
            raise ValueError(f"{path}: expected object")
        field(workload, "description", "str", path)
        items(field(workload, "input_shape", "list", path), "int", f"{path}.input_shape")
        systems = field(workload, "systems", "object", path)
        if not systems:
            raise ValueError(f"{path}.systems: empty")
        for system, entry in systems.items():
            if not isinstance(entry, dict):
                raise ValueError(f"{path}.systems.{system}: expected object")
            s1_system(entry, f"{path}.systems.{system}")


def s2_checkpoint(workload: dict, path: str) -> None:
    """One S2 workload: its budget, its bound and every system's time against it."""
    field(field(workload, "workload", "object", path), "name", "str", f"{path}.workload")
    fields(
        workload,
        path,
        weight_bytes="int",
        ram_budget_bytes="int",
        bytes_read_per_forward="int",
        bound_s="number",
        tensortorrent_over_bound="number",
        measured_over_predicted_at_call_speed="number",
    )
    if workload.get("accelerate_over_tensortorrent") is not None:  # None where Accelerate did not run
        field(workload, "accelerate_over_tensortorrent", "number", path)
    field(field(workload, "reads", "object", path), "best_plain_gbps", "number", f"{path}.reads")
    systems = field(workload, "systems", "object", path)
    for name in ("eager", "tensortorrent"):  # the bound and the ratios are made of these
        field(systems, name, "object", f"{path}.systems")
    for name, system in systems.items():
        where = f"{path}.systems.{name}"
        if not isinstance(system, dict):
            raise ValueError(f"{where}: expected object")
        if system.get("status", "ok") != "ok":  # files before statuses were recorded hold ok systems only
            if system["status"] not in ("failed", "missing") or not isinstance(system.get("error"), str):
                raise ValueError(f"{where}: a system not ok must be failed or missing, with an error string")
            continue
        fields(
            system, where, median_s="number", over_bound="number", peak_rss_bytes="int", max_abs_error_vs_eager="number"
        )
        items(field(system, "forward_s", "list", where), "number", f"{where}.forward_s")


def s2_instructions(records: list, path: str) -> None:
    for index, record in enumerate(records):
        where = f"{path}[{index}]"
        if not isinstance(record, dict):
            raise ValueError(f"{where}: expected object")
        fields(record, where, label="str", kind="str", device="str")
        fields(
            record, where, start_us="number", end_us="number", predicted_start_us="number", predicted_end_us="number"
        )


def s2(data: dict) -> None:
    reads = field(data, "reads", "object", "$")
    fields(reads, "$.reads", best_plain="str", best_plain_gbps="number", engine_over_best="number")
    field(field(reads, "engine_gbps", "object", "$.reads"), "median", "number", "$.reads.engine_gbps")
    stream = field(data, "stream", "object", "$")
    fields(
        stream,
        "$.stream",
        width="int",
        layers="int",
        weight_bytes="int",
        ram_budget_bytes="int",
        bound_s="number",
        streamed_over_bound="number",
    )
    field(field(stream, "streamed_s", "object", "$.stream"), "median", "number", "$.stream.streamed_s")
    if "instructions" in stream:  # absent from files written before it was recorded
        s2_instructions(field(stream, "instructions", "list", "$.stream"), "$.stream.instructions")
    for index, workload in enumerate(field(data, "checkpoints", "list", "$")):
        if not isinstance(workload, dict):
            raise ValueError(f"$.checkpoints[{index}]: expected object")
        s2_checkpoint(workload, f"$.checkpoints[{index}]")


def s3_sizes(rows: list, path: str, **kinds: str) -> None:
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"{path}[{index}]: expected object")
        fields(row, f"{path}[{index}]", regions="int", **kinds)


def s3(data: dict) -> None:
    optimality = field(data, "optimality", "object", "$")
    fields(optimality, "$.optimality", instances="int", median_gap="number", worst_gap="number")
    field(optimality, "within_1_percent", "number", "$.optimality")
    if "by_regions" in optimality:  # absent from files written before it was recorded
        rows = field(optimality, "by_regions", "list", "$.optimality")
        s3_sizes(rows, "$.optimality.by_regions", instances="int", median_gap="number", worst_gap="number")
    large = field(data, "large", "object", "$")
    fields(large, "$.large", regions="int", devices="int", greedy_over_search="number")
    fields(
        field(large, "planning_s", "object", "$.large"),
        "$.large.planning_s",
        median="number",
        min="number",
        max="number",
    )
    if "planning_sweep" in data:
        rows = field(data, "planning_sweep", "list", "$")
        s3_sizes(rows, "$.planning_sweep", devices="int")
        for index, row in enumerate(rows):
            where = f"$.planning_sweep[{index}]"
            field(field(row, "planning_s", "object", where), "median", "number", f"{where}.planning_s")
    fields(
        field(data, "greedy_real_model", "object", "$"), "$.greedy_real_model", regions="int", greedy_over_plan="number"
    )
    for name, row in field(data, "prediction", "object", "$").items():
        where = f"$.prediction.{name}"
        if not isinstance(row, dict):
            raise ValueError(f"{where}: expected object")
        fields(
            row,
            where,
            regions="int",
            predicted_s="number",
            measured_median_s="number",
            measured_min_s="number",
            measured_max_s="number",
            measured_over_predicted="number",
        )


def seconds(obj: dict, path: str) -> None:
    fields(obj, path, median_s="number", min_s="number", max_s="number")
    items(field(obj, "samples_s", "list", path), "number", f"{path}.samples_s")


def compile_time(data: dict) -> None:
    fields(field(data, "targets", "object", "$"), "$.targets", gpt2_small_ratio="number", gpt2_small_seconds="number")
    field(data, "protocol", "str", "$")
    for name, result in field(data, "workloads", "object", "$").items():
        path = f"$.workloads.{name}"
        if result.get("status") == "failed":
            field(result, "error", "str", path)
            continue
        seconds(field(result, "torch_export", "object", path), f"{path}.torch_export")
        seconds(field(result, "tensortorrent_compile", "object", path), f"{path}.tensortorrent_compile")
        fields(result, path, ratio_of_medians="number", description="str")


def generate(data: dict) -> None:
    _generated(data, "$")
    if "mixture_of_experts" in data:  # since the Qwen3-MoE joined the Llama
        _generated(field(data, "mixture_of_experts", "object", "$"), "$.mixture_of_experts")
    field(data, "batches", "object", "$")


def _generated(data: dict, at: str) -> None:
    """One model's generation figures: in RAM and under the budget, with its bound."""
    workload = field(data, "workload", "object", at)
    fields(workload, f"{at}.workload", weights_bytes="int", prompt_tokens="int", new_tokens="int", batch="int")
    parts = {
        "in_ram": ("hugging_face", "hugging_face_compiled", "tensortorrent"),
        "under_budget": ("accelerate", "tensortorrent"),
    }
    for part, systems in parts.items():
        result = field(data, part, "object", at)
        for name in systems:
            path = f"{at}.{part}.{name}"
            figures = field(result, name, "object", f"{at}.{part}")
            if name != "tensortorrent" and "error" in figures:  # a baseline whose worker died
                field(figures, "error", "str", path)
                continue
            fields(figures, path, prefill_tok_s="number", decode_tok_s="number", ttft_s="number", total_s="number")
            items(field(figures, "runs", "list", path), "object", f"{path}.runs")
    bound = field(field(data, "under_budget", "object", at), "bound", "object", f"{at}.under_budget")
    fields(bound, f"{at}.under_budget.bound", decode_step_read_bytes="int", best_plain_gbps="number")
    fields(bound, f"{at}.under_budget.bound", decode_step_s="number")
    if bound.get("tensortorrent_over_bound") is not None:  # None: a step read nothing from storage
        field(bound, "tensortorrent_over_bound", "number", f"{at}.under_budget.bound")


def compressed(data: dict) -> None:
    """Each workload's formats and systems: time per forward, accuracy, and the ratios the targets judge."""
    for index, workload in enumerate(field(data, "workloads", "list", "$")):
        at = f"$.workloads[{index}]"
        fields(workload, at, float32_bytes="int")
        for name, figures in field(workload, "formats", "object", at).items():
            path = f"{at}.formats.{name}"
            fields(figures, path, bytes="int", over_float32_time="number", streamed_over_bound="number", met="bool")
            fields(figures, path, accelerate_over_this="number?")
        for name, result in field(workload, "systems", "object", at).items():
            path = f"{at}.systems.{name}"
            if field(result, "status", "str", path) != "ok":
                field(result, "error", "str", path)
                continue
            fields(result, path, median_s="number", cosine_vs_eager="number", max_abs_error_vs_eager="number")
            items(field(result, "forward_s", "list", path), "number", f"{path}.forward_s")


def weight_only_kernels(data: dict) -> None:
    """One layer's milliseconds per product, per row count and system."""
    field(data, "torchao", "str", "$")
    items(field(data, "layer", "list", "$"), "int", "$.layer")
    for rows, figures in field(data, "ms_per_product", "object", "$").items():
        for name in figures:
            field(figures, name, "number", f"$.ms_per_product.{rows}")


SUITES = {
    "S1": s1,
    "S2": s2,
    "S3": s3,
    "compile_time": compile_time,
    "generate": generate,
    "compressed": compressed,
    "weight_only_kernels": weight_only_kernels,
}
# The older benchmarks name themselves by "benchmark" only; S1 also writes "suite".
BENCHMARK_SUITES = {"s1_fit": "S1", "streaming": "S2", "planner": "S3"}


def suite_of(data: dict) -> str:
    """Which suite a results file belongs to, from its own fields."""
    suite = data.get("suite") or BENCHMARK_SUITES.get(data.get("benchmark"))
    if suite not in SUITES:
        raise ValueError(f"$.benchmark: not a results file of suite {', '.join(SUITES)}: {data.get('benchmark')!r}")
    return suite


def validate(data: dict) -> None:
    """Raises ValueError naming the JSON path of the first problem in a results file of a suite in SUITES."""
    if not isinstance(data, dict):
        raise ValueError("$: expected object")
    suite = suite_of(data)
    envelope(data)
    SUITES[suite](data)


def load_latest(results_dir: Path, stem: str) -> dict | None:
    """RESULTS_DIR/STEM-latest.json, validated; None where that suite has not been run.
    A file that is there but broken raises ValueError naming the file and the JSON path."""
    path = Path(results_dir) / f"{stem}-latest.json"
    return load(path) if path.exists() else None


def load(path: Path) -> dict:
    """One results file, validated; ValueError naming the file and the JSON path."""
    try:
        data = json.loads(path.read_text())
        validate(data)
    except ValueError as error:  # json.JSONDecodeError is one too
        raise ValueError(f"{path}: {error}") from None
    return data


def load_earliest_full(results_dir: Path, stem: str) -> dict | None:
    """The earliest full run among the dated files RESULTS_DIR/STEM-<UTC>.json, validated:
    the baseline a later run is read against; None where there is none."""
    for path in sorted(Path(results_dir).glob(f"{stem}-*.json")):
        if re.fullmatch(rf"{re.escape(stem)}-\d{{8}}T\d{{6}}Z\.json", path.name):
            data = load(path)
            if data["mode"] == "full":
                return data
    return None


def load_latest_elsewhere(results_dir: Path, stem: str, latest: dict | None) -> list[dict]:
    """Per CPU other than `latest`'s, the newest full run among the dated files
    RESULTS_DIR/STEM-<UTC>.json that every run writes beside STEM-latest.json, validated;
    newest first. The latest run's CPU is not the only one users have: another CPU's
    figures stay in view after a run on this one replaces STEM-latest.json."""
    here = latest["machine"]["cpu_model"] if latest is not None else None
    newest: dict[str, dict] = {}
    for path in sorted(Path(results_dir).glob(f"{stem}-*.json")):
        if not re.fullmatch(rf"{re.escape(stem)}-\d{{8}}T\d{{6}}Z\.json", path.name):
            continue
        data = load(path)
        cpu = data["machine"]["cpu_model"]
        if data["mode"] != "full" or cpu == here:
            continue
        if cpu not in newest or _utc(data) > _utc(newest[cpu]):
            newest[cpu] = data
    return sorted(newest.values(), key=_utc, reverse=True)


def _utc(data: dict) -> datetime:
    return datetime.fromisoformat(data["utc"])

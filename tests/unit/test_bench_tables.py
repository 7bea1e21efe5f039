"""The results validator and the README table generator (bench/results_schema.py, bench/tables.py).

Fixture results are written here, small and by hand, so that a table's exact Markdown can
be asserted; no matplotlib or benchmark extra is needed.
"""

from __future__ import annotations

import copy
import importlib
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MACHINE = {
    "cpu_model": "AMD EPYC",
    "cores_usable": 2,
    "ram_gib": 23.5,
    "platform": "Linux",
    "python": "3.11.7",
    "torch": "2.13.0+cpu",
    "tensortorrent": "0.1.0",
    "git_commit": "0123456789abcdef",
    "git_dirty": False,
}


@pytest.fixture
def bench(monkeypatch):
    """bench/'s modules, imported as the scripts import each other (bench/ on sys.path)."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    return importlib.import_module("tables"), importlib.import_module("results_schema")


@pytest.fixture
def suites(monkeypatch):
    """Each suite's renderer (bench/tables_s1.py, _s2, _s3)."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    return [importlib.import_module(f"tables_s{n}") for n in (1, 2, 3)]


def ok(median_us: float, low_us: float, high_us: float, ratio: float, error: float, **extra) -> dict:
    timing = {"median_us": median_us, "min_us": low_us, "max_us": high_us, "calls_per_sample": 8}
    timing["samples_us"] = [low_us, median_us, high_us]
    paired = {} if ratio == 1.0 else {"eager": paired_ratio(ratio)}
    result = {"cosine": None, "argmax_agreement": None, "build_s": None, "notes": None, **extra}
    return {
        "status": "ok",
        "timing": timing,
        "ratio_to_eager": ratio,
        "paired_ratios": paired,
        "max_abs_error": error,
        **result,
    }


def paired_ratio(median: float) -> dict:
    return {"median": median, "low": median - 0.01, "high": median + 0.02, "confidence": 0.95}


def s1_results(mode: str = "full") -> dict:
    systems = {
        "eager": ok(11144.0, 10578.7, 13145.4, 1.0, 0.0),
        "torch_compile": {
            "status": "failed",
            "error": "BackendCompilerFailed: inductor\nraised  RuntimeError: no `cc`",
        },
        "onnxruntime": {"status": "missing", "error": "Missing: onnxruntime is not installed"},
        "tensortorrent": ok(11307.2, 10746.3, 13536.4, 1.0146, 2.4e-07, build_s=0.2, notes="1 region(s), direct path"),
        "tensortorrent_inductor": ok(950.0, 900.0, 1210.0, 0.0852, 0.0, cosine=0.9999991, argmax_agreement=1.0),
    }
    return {
        "suite": "S1",
        "benchmark": "s1_fit",
        "mode": mode,
        "utc": "2026-12-03T10:00:00+00:00",
        "machine": dict(MACHINE),
        "versions": {
            "torch": "2.13.0+cpu",
            "tensortorrent": "0.1.0",
            "transformers": "4.57.0",
            "onnxruntime": None,
            "onnx": None,
        },
        "torch_threads": 2,
        "settings": {"runs": 21, "sample_ms": 80.0, "warmup_ms": 300.0},
        "workloads": {
            "mlp_2048x8": {
                "description": "8 x (Linear(2048, 2048), ReLU)",
                "input_shape": [8, 2048],
                "systems": systems,
            }
        },
        "duration_s": 12.0,
    }


EXPECTED_S1 = """\
### S1: models that fit in memory (CPU)

Measured on AMD EPYC, 2 usable cores, 23.5 GiB RAM; commit `0123456789`; 2026-12-03 10:00 UTC; full run. \
torch 2.13.0+cpu, onnxruntime not installed, transformers 4.57.0; 2 torch threads; 21 samples of about 80 ms per \
system, interleaved, after a 300 ms warm-up.

- mlp_2048x8: 8 x (Linear(2048, 2048), ReLU)

| workload | system | latency per call: median (min-max) | vs eager | agreement with eager | build, remarks |
| --- | --- | --- | --- | --- | --- |
| mlp_2048x8 | eager | 11.1 ms (10.6-13.1) | 1.00x | reference |  |
|  | torch.compile | failed, note 1 |  |  |  |
|  | torch.compile (freezing) | not recorded |  |  |  |
|  | ONNX Runtime | missing (not installed), note 2 |  |  |  |
|  | TensorTorrent | 11.3 ms (10.7-13.5) | 1.01x | max abs 2.4e-07 | built in 0.20 s; 1 region(s), direct path |
|  | TensorTorrent (Inductor regions) | 950 us (900-1210) | 0.09x | max abs 0, cosine 0.999999, argmax 100.0% |  |
|  | TensorTorrent (auto regions) | not recorded |  |  |  |

Paired ratios: per round, a system's sample over the reference's sample of the same round; the median over rounds \
[95% confidence interval of that median]. Lower is faster; an interval that contains 1.000 is a difference this run \
cannot tell from noise.

| workload | system | vs eager | vs torch.compile | vs torch.compile (freezing) |
| --- | --- | --- | --- | --- |
| mlp_2048x8 | TensorTorrent | 1.015x [1.005, 1.035] | - | - |
|  | TensorTorrent (Inductor regions) | 0.085x [0.075, 0.105] | - | - |

Notes:

1. torch.compile on mlp_2048x8, failed: `BackendCompilerFailed: inductor raised RuntimeError: no 'cc'`
2. ONNX Runtime on mlp_2048x8, missing: `Missing: onnxruntime is not installed`
"""


def s2_system(name: str, times: list[float], over_bound: float, rss: int) -> dict:
    return {
        "system": name,
        "forward_s": times,
        "median_s": sorted(times)[len(times) // 2],
        "over_bound": over_bound,
        "peak_rss_bytes": rss,
        "max_abs_error_vs_eager": 0.0,
    }


def s2_results() -> dict:
    systems = {
        "eager": s2_system("eager", [0.38, 0.37, 0.39], 0.46, 8 << 30),
        "tensortorrent": s2_system("tensortorrent", [0.95, 1.02, 0.92], 1.15, 5 << 29)
        | {"read_gbps": [2.6, 2.7, 2.61]},
        "accelerate": s2_system("accelerate", [2.44, 2.22, 2.01], 2.71, 6 << 30),
        "mmap": s2_system("mmap", [3.67, 4.70, 5.88], 5.74, 4 << 30),
    }
    return {
        "benchmark": "streaming",
        "mode": "full",
        "utc": "2026-12-02T01:58:58+00:00",
        "machine": dict(MACHINE),
        "reads": {
            "bytes": 1 << 30,
            "engine_gbps": {"median": 2.85},
            "best_plain": "direct_4",
            "best_plain_gbps": 2.8,
            "engine_over_best": 1.02,
        },
        "stream": {
            "width": 4096,
            "layers": 16,
            "weight_bytes": 1 << 30,
            "ram_budget_bytes": 1 << 29,
            "streamed_s": {"median": 0.351},
            "bound_s": 0.287,
            "streamed_over_bound": 1.22,
        },
        "checkpoints": [
            {
                "workload": {"name": "mlp", "width": 4096, "layers": 64, "vocab": 0},
                "weight_bytes": 4 << 30,
                "ram_budget_bytes": 2 << 30,
                "bytes_read_per_forward": 2416508928,
                "bound_s": 0.8194,
                "reads": {"best_plain_gbps": 2.95},
                "systems": systems,
                "tensortorrent_over_bound": 1.15,
                "accelerate_over_tensortorrent": 2.34,
                "measured_over_predicted_at_call_speed": 1.01,
            }
        ],
    }


def s3_results() -> dict:
    prediction = {
        "devices": ["cpu"],
        "regions": 12,
        "predicted_s": 0.01033,
        "measured_median_s": 0.01041,
        "measured_min_s": 0.01016,
        "measured_max_s": 0.01216,
        "measured_over_predicted": 1.0073,
    }
    return {
        "benchmark": "planner",
        "mode": "quick",
        "utc": "2026-12-01T17:23:00+00:00",
        "machine": MACHINE | {"git_dirty": True},
        "optimality": {"instances": 300, "median_gap": 0.0, "worst_gap": 0.004, "within_1_percent": 1.0},
        "large": {
            "regions": 1000,
            "devices": 4,
            "planning_s": {"median": 0.3415, "min": 0.3372, "max": 0.3433},
            "greedy_over_search": 1.70,
        },
        "greedy_real_model": {"regions": 12, "greedy_over_plan": 7.38},
        "prediction": {"cpu/mlp": prediction, "declared/stack": prediction | {"measured_over_predicted": 1.031}},
    }


def test_the_validator_accepts_every_suite(bench):
    _, schema = bench
    for data in (s1_results(), s2_results(), s3_results()):
        schema.validate(data)


@pytest.mark.parametrize("stem", ["streaming", "planner", "s1"])
def test_the_validator_accepts_the_results_in_the_repository(bench, stem):
    _, schema = bench
    if not (ROOT / "bench" / "results" / f"{stem}-latest.json").exists():
        pytest.skip(f"{stem} has not been run here")
    assert schema.load_latest(ROOT / "bench" / "results", stem) is not None


@pytest.mark.parametrize(
    ("break_it", "message"),
    [
        (
            lambda d: d["workloads"]["mlp_2048x8"]["systems"]["eager"]["timing"].pop("median_us"),
            "$.workloads.mlp_2048x8.systems.eager.timing.median_us: missing",
        ),
        (
            lambda d: d["workloads"]["mlp_2048x8"]["systems"]["onnxruntime"].pop("error"),
            "$.workloads.mlp_2048x8.systems.onnxruntime.error: missing",
        ),
        (
            lambda d: d["workloads"]["mlp_2048x8"]["systems"]["eager"].update(status="slow"),
            "$.workloads.mlp_2048x8.systems.eager.status: expected one of ok, failed, missing, skipped",
        ),
        (
            lambda d: d["workloads"]["mlp_2048x8"]["systems"]["tensortorrent"].update(ratio_to_eager="1.0"),
            "$.workloads.mlp_2048x8.systems.tensortorrent.ratio_to_eager: expected number",
        ),
        (lambda d: d["machine"].pop("cores_usable"), "$.machine.cores_usable: missing"),
        (lambda d: d.update(mode="fast"), "$.mode: expected 'quick' or 'full'"),
        (lambda d: d.update(utc="yesterday"), "$.utc: not an ISO 8601 time"),
    ],
)
def test_the_validator_names_the_path_of_the_first_problem_in_s1(bench, break_it, message):
    _, schema = bench
    data = copy.deepcopy(s1_results())
    break_it(data)
    with pytest.raises(ValueError) as raised:
        schema.validate(data)
    assert str(raised.value).startswith(message)


def test_the_validator_names_the_path_in_s2_and_s3(bench):
    _, schema = bench
    streaming = s2_results()
    streaming["checkpoints"][0]["systems"]["accelerate"]["peak_rss_bytes"] = "6 GiB"
    with pytest.raises(ValueError, match=r"^\$\.checkpoints\[0\]\.systems\.accelerate\.peak_rss_bytes: expected int"):
        schema.validate(streaming)
    planner = s3_results()
    del planner["prediction"]["cpu/mlp"]["measured_over_predicted"]
    with pytest.raises(ValueError, match=r"^\$\.prediction\.cpu/mlp\.measured_over_predicted: missing"):
        schema.validate(planner)
    with pytest.raises(ValueError, match=r"^\$\.benchmark: not a results file"):
        schema.validate({"benchmark": "overhead"})


def test_the_s1_table_is_exactly_the_expected_markdown(suites):
    assert suites[0].render_s1(s1_results()) == EXPECTED_S1


def test_paired_ratios_to_torch_compile_join_those_to_eager_where_it_ran(suites):
    data = s1_results()
    systems = data["workloads"]["mlp_2048x8"]["systems"]
    systems["torch_compile"] = ok(10900.0, 10500.0, 12000.0, 0.978, 1e-6)
    systems["tensortorrent_inductor"]["paired_ratios"]["torch_compile"] = paired_ratio(0.974)
    text = suites[0].render_s1(data)
    assert "| mlp_2048x8 | torch.compile | 0.978x [0.968, 0.998] | - |" in text
    assert "|  | TensorTorrent (Inductor regions) | 0.085x [0.075, 0.105] | 0.974x [0.964, 0.994] |" in text


def test_results_without_paired_ratios_get_no_paired_table(suites):
    data = s1_results()
    for result in data["workloads"]["mlp_2048x8"]["systems"].values():
        result.pop("paired_ratios", None)
    assert "Paired ratios" not in suites[0].render_s1(data)


def test_a_failed_or_missing_baseline_stays_in_the_table_with_its_error(suites):
    data = s1_results()
    data["workloads"]["mlp_2048x8"]["systems"]["torch_compile"]["error"] = "x" * 1000
    del data["workloads"]["mlp_2048x8"]["systems"]["tensortorrent_inductor"]
    text = suites[0].render_s1(data)
    assert "| torch.compile | failed, note 1 |" in text
    assert f"1. torch.compile on mlp_2048x8, failed: `{'x' * 300} ...` (the whole error is in the results file)" in text
    assert "| ONNX Runtime | missing (not installed), note 2 |" in text
    assert "| TensorTorrent (Inductor regions) | not recorded |" in text


def test_a_quick_run_says_so_first(suites):
    text = suites[0].render_s1(s1_results(mode="quick"))
    assert text.splitlines()[2] == "**Quick run: smaller sizes, fewer samples; a smoke test, not a measurement.**"
    assert "2026-12-03 10:00 UTC; quick run." in text


def test_the_s2_and_s3_tables(suites):
    s2 = suites[1].render_s2(s2_results())
    # A result from before the compute floor and N were recorded: eager and the bytes read.
    assert (
        "| mlp (width 4096, 64 layers) | 4.00 GiB | 2.00 GiB | 819 ms = max(380 ms (eager), 2.42 GB / 2.95 GB/s) |"
        in s2
    )
    assert "| 1.150x | 2.340x | 1.010 (2.61 GB/s) |" in s2
    assert "| mlp at 2.00 GiB | TensorTorrent | 950 ms (920-1020) | 1.150x | 2.50 GiB | 0 |" in s2
    assert "|  | Accelerate (disk offload) | 2.22 s (2.01-2.44) | 2.710x | 6.00 GiB | 0 |" in s2
    s3 = suites[2].render_s3(s3_results())
    assert "**Quick run" in s3 and "commit `0123456789` (with uncommitted changes)" in s3
    assert "| (a) gap to the exhaustive optimum, 300 small problems | median 0.00%, worst 0.40%; 100.0% within 1%" in s3
    assert "| (b) planning time, 1000 regions on 4 devices | 342 ms (337-343) | under 1 s |" in s3
    assert "| cpu/mlp | 12 | 10.3 ms | 10.4 ms (10.2-12.2) | 1.007 |" in s3
    assert "| declared/stack (see the note) | 12 |" in s3 and "agreement there is by construction" in s3


@pytest.mark.parametrize("status", ["failed", "missing"])
def test_an_s2_baseline_that_did_not_run_stays_in_the_tables_with_its_error(bench, suites, status):
    _, schema = bench
    data = s2_results()
    workload = data["checkpoints"][0]
    workload["systems"]["accelerate"] = {"system": "accelerate", "status": status, "error": "RuntimeError: out of disk"}
    workload["accelerate_over_tensortorrent"] = None
    schema.validate(data)
    s2 = suites[1].render_s2(data)
    label = "failed" if status == "failed" else "missing (not installed)"
    assert f"|  | Accelerate (disk offload) | {label}, note 1 |  |  |  |" in s2
    assert f"1. Accelerate (disk offload) on mlp, {status}: `RuntimeError: out of disk`" in s2
    assert "| Accelerate did not run (see below) |" in s2
    del workload["systems"]["accelerate"]["error"]
    with pytest.raises(ValueError, match=r"systems\.accelerate: a system not ok must be failed or missing"):
        schema.validate(data)


def test_a_suite_not_run_gets_a_line_with_the_command(bench):
    tables, _ = bench
    text = tables.render({"S1": None, "S2": None, "S3": s3_results()}, figures=["s3_planner.png"])
    assert "S1 has not been run: `.venv/bin/python bench/s1_fit.py` writes `bench/results/s1-latest.json`." in text
    assert "S2 has not been run: `.venv/bin/python bench/streaming.py`" in text
    assert "### S3: the planner" in text
    assert text.rstrip().endswith("![S3: optimality gap and planning time against graph size](figures/s3_planner.png)")


def write_results(directory: Path, **files: dict) -> Path:
    directory.mkdir()
    for stem, data in files.items():
        (directory / f"{stem}-latest.json").write_text(json.dumps(data))
    return directory


def test_check_detects_a_stale_readme_and_a_rewrite_fixes_it(bench, tmp_path, capsys):
    tables, _ = bench
    results = write_results(tmp_path / "results", s1=s1_results(), planner=s3_results())
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\n## Benchmarks\n\n{tables.BEGIN}\nold numbers\n{tables.END}\n\n## License\n")
    readme.chmod(0o644)
    common = ["--page", str(readme), "--results", str(results), "--figures", str(tmp_path / "none")]
    assert tables.main(["--check", *common]) == 1
    assert tables.main(common) == 0
    text = readme.read_text()
    assert text.startswith(f"# Title\n\n## Benchmarks\n\n{tables.BEGIN}\nGenerated by `python bench/tables.py`")
    assert text.endswith(f"{tables.END}\n\n## License\n") and "old numbers" not in text
    assert EXPECTED_S1 in text and "S2 has not been run" in text
    assert readme.stat().st_mode & 0o777 == 0o644, "the rewrite keeps the file's permissions"
    assert tables.main(["--check", *common]) == 0
    capsys.readouterr()
    assert tables.main(["--print", *common]) == 0
    assert capsys.readouterr().out == tables.render(tables.load_results(results), [])


def test_a_readme_without_markers_or_a_broken_results_file_is_an_error(bench, tmp_path, capsys):
    tables, _ = bench
    readme = tmp_path / "README.md"
    readme.write_text("# Title\n")
    results = write_results(tmp_path / "results")
    assert tables.main(["--page", str(readme), "--results", str(results)]) == 2
    assert "bench-tables:begin" in capsys.readouterr().err and readme.read_text() == "# Title\n"
    broken = s1_results()
    del broken["torch_threads"]
    (results / "s1-latest.json").write_text(json.dumps(broken))
    assert tables.main(["--print", "--results", str(results)]) == 2
    assert "s1-latest.json: $.torch_threads: missing" in capsys.readouterr().err


def on_cpu(cpu: str, utc: str, mode: str = "full", ratio: float = 0.5) -> dict:
    data = s1_results(mode)
    data["machine"]["cpu_model"], data["utc"] = cpu, utc
    data["workloads"]["mlp_2048x8"]["systems"]["tensortorrent"]["paired_ratios"]["eager"] = paired_ratio(ratio)
    return data


def test_s1_on_other_cpus_shows_the_newest_full_run_of_each(bench, suites, tmp_path):
    tables, schema = bench
    results = write_results(tmp_path / "results", s1=s1_results())  # AMD EPYC, the latest
    dated = {
        "s1-20261201T100000Z.json": on_cpu("Intel Xeon", "2026-12-01T10:00:00+00:00", ratio=0.9),
        "s1-20261202T100000Z.json": on_cpu("Intel Xeon", "2026-12-02T10:00:00+00:00", ratio=0.8),
        "s1-20261203T100000Z.json": on_cpu("Intel Xeon", "2026-12-03T10:00:00+00:00", mode="quick"),
        "s1-20261130T100000Z.json": on_cpu("AMD EPYC", "2026-11-30T10:00:00+00:00"),  # the latest's own CPU
        "s1-20261129T100000Z.json": on_cpu("Ampere Altra", "2026-11-29T10:00:00+00:00", ratio=0.7),
        "s1-copy.json": on_cpu("Other", "2026-12-04T10:00:00+00:00"),  # not a dated run: ignored
    }
    for name, data in dated.items():
        (results / name).write_text(json.dumps(data))
    runs = tables.load_s1_elsewhere(results, tables.load_results(results))
    assert [(r["machine"]["cpu_model"], r["utc"][:10]) for r in runs] == [
        ("Intel Xeon", "2026-12-02"),
        ("Ampere Altra", "2026-11-29"),
    ]
    text = suites[0].render_s1_elsewhere(runs)
    assert text.startswith("### S1 on other machines\n")
    assert "Measured on Intel Xeon, 2 usable cores, 23.5 GiB RAM; commit `0123456789`; 2026-12-02 10:00 UTC" in text
    assert (
        "| workload | eager | torch.compile | torch.compile (freezing) | ONNX Runtime | TensorTorrent "
        "| TensorTorrent (Inductor regions) | TensorTorrent (auto regions) |" in text
    )
    assert (
        "| mlp_2048x8 | 11.1 ms | failed | not recorded | missing (not installed) | 0.80x | 0.09x | not recorded |"
        in text
    )
    assert (
        "| mlp_2048x8 | 11.1 ms | failed | not recorded | missing (not installed) | 0.70x | 0.09x | not recorded |"
        in text
    )
    block = tables.render(tables.load_results(results), [], runs)
    assert block.index("### S1: models") < block.index("### S1 on other machines") < block.index("S2 has not")
    # A broken dated file is an error naming it, as a broken latest one is.
    (results / "s1-20261128T100000Z.json").write_text("{")
    with pytest.raises(ValueError, match="s1-20261128T100000Z.json"):
        schema.load_latest_elsewhere(results, "s1", None)


def test_the_readme_tables_are_those_of_the_results_in_the_repository(bench, capsys):
    """make bench regenerates them; a results file committed without the README would fail here."""
    tables, _ = bench
    assert tables.main(["--check"]) == 0, capsys.readouterr().err

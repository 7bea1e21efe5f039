"""Every benchmark's --quick run works and writes well-formed results (no timing is asserted)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_quick(script: str, out: Path, *extra: str, timeout_s: int = 300) -> dict:
    """Runs bench/SCRIPT --quick --out OUT and returns the JSON it wrote."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), "--quick", "--out", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text())


def bench_module(name: str):
    """bench/NAME.py, imported as the bench scripts import each other: by bare name."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "bench"))


# The slowest first: pytest-xdist hands a worker its next test file when two tests of
# this one are left, and that file waits behind them.
def test_generate_benchmark_quick_run_and_its_table(tmp_path):
    # Inductor compiles the in-RAM programs' regions too: minutes where its cache is cold.
    results = run_quick("generate.py", tmp_path / "generate.json", timeout_s=600)
    results_schema = bench_module("results_schema")
    tables_generate = bench_module("tables_generate")
    results_schema.validate(results)
    assert "| weights in RAM | TensorTorrent |" in tables_generate.render(results)
    assert "In RAM with inductor regions, the Llama decodes" in tables_generate.render(results)
    assert results["mode"] == "quick" and results["workload"]["new_tokens"] > 1
    parts = {
        "in_ram": {"hugging_face", "hugging_face_compiled", "tensortorrent", "tensortorrent_inductor"},
        "under_budget": {"accelerate", "tensortorrent"},
    }
    for part, systems in parts.items():
        assert systems <= set(results[part])
        for name in systems:
            figures = results[part][name]
            assert figures["prefill_tok_s"] > 0 and figures["decode_tok_s"] > 0 and len(figures["runs"]) == 2
    bound = results["under_budget"]["bound"]
    assert bound["decode_step_read_bytes"] > 0 and bound["tensortorrent_over_bound"] > 0
    assert "decode_tok_s" in results["batches"]["1"]


def test_streaming_benchmark_quick_run(tmp_path):
    results = run_quick("streaming.py", tmp_path / "streaming.json", "--dir", str(tmp_path))
    stream = results["stream"]
    assert stream["max_abs_error"] < 1e-4
    assert stream["peak_ram_bytes"] <= stream["ram_budget_bytes"] < stream["weight_bytes"]
    assert stream["bytes_read_per_forward"] >= stream["weight_bytes"] - stream["ram_budget_bytes"]
    assert stream["measured_over_predicted_at_call_speed"] > 0
    assert set(results["reads"]["plain_gbps"]) >= {"buffered_1", "buffered_8", "direct_1", "direct_8"}
    for workload in results["checkpoints"]:  # suite S2: every system on each checkpoint, in its own process
        systems = workload["systems"]
        assert set(systems) == {"eager", "tensortorrent", "accelerate", "mmap"}
        assert all(system["max_abs_error_vs_eager"] < 1e-4 for system in systems.values())
        assert workload["ram_budget_bytes"] < workload["weight_bytes"] and workload["bytes_read_per_forward"] > 0
        assert workload["measured_over_predicted_at_call_speed"] > 0
        assert len(workload["reads"]["plain_gbps"]["direct_2"]["samples"]) == 4, "two rounds before, two after"
    assert [p.name for p in tmp_path.iterdir()] == ["streaming.json"], "the scratch files are removed"


def test_compressed_benchmark_quick_run_and_its_table(tmp_path):
    results = run_quick("compressed.py", tmp_path / "compressed.json", "--dir", str(tmp_path), "--workloads", "mlp")
    results_schema = bench_module("results_schema")
    tables_compressed = bench_module("tables_compressed")
    results_schema.validate(results)
    assert results["suite"] == "compressed" and results["mode"] == "quick"
    (workload,) = results["workloads"]
    formats = ("int8", "int4")
    runs = {f"{f}{kind}" for f in formats for kind in ("", "_streamed", "_in_ram")}
    assert set(workload["systems"]) == {"eager", "float32", "accelerate"} | runs
    assert workload["formats"]["int8"]["over_float32_bytes"] <= 0.27
    assert workload["formats"]["int4"]["over_float32_bytes"] <= 0.15
    for weight_format in formats:
        assert workload["systems"][f"{weight_format}_streamed"]["bytes_read_per_forward"][0] > 0
    assert workload["systems"]["int8"]["cosine_vs_eager"] >= 0.999
    assert workload["systems"]["int4"]["cosine_vs_eager"] >= 0.99
    assert "### Compressed weights" in tables_compressed.render(results)


def test_weight_only_kernels_quick_run_and_its_table(tmp_path):
    results = run_quick("weight_only_kernels.py", tmp_path / "kernels.json")
    results_schema = bench_module("results_schema")
    tables_kernels = bench_module("tables_kernels")
    results_schema.validate(results)
    assert results["suite"] == "weight_only_kernels" and results["mode"] == "quick"
    for figures in results["ms_per_product"].values():
        assert {"float32", "tensortorrent int8", "tensortorrent int4"} <= set(figures)
        assert all(ms > 0 for ms in figures.values())
    assert "### Weight-only kernels" in tables_kernels.render(results)


def test_gpu_suite_quick_run_on_the_cpu(tmp_path):
    # The device check's code paths at small sizes on the CPU: no GPU figure, no timing asserted.
    results = run_quick("s4_gpu.py", tmp_path / "s4.json", "--device", "cpu", "--samples", "1")
    assert results["quick"] and results["suite"] == "S4"
    assert list(results["fit_in_vram"]) == ["mlp_2048x8", "transformer_block", "gpt2_small", "resnet50"], "S1's"
    for workload in results["fit_in_vram"].values():
        assert "failed" not in workload, workload.get("traceback")
        assert workload["agreement_with_cpu_eager"]["cosine_min"] > 0.999
    for workload in results["fit_in_vram_compiled"].values():
        assert "failed" not in workload, workload.get("traceback")
        assert workload["tensortorrent_inductor_agreement"]["cosine_min"] > 0.999
        assert workload["ratio_tt_inductor_over_torch_compile"] > 0
    beyond = results["beyond_vram"]
    assert "failed" not in beyond, beyond.get("failed")
    # bf16 logits of random weights hold near-ties that another kernel's rounding flips: cosine, not argmax.
    assert beyond["tensortorrent_agreement"]["cosine_min"] > 0.999 and "accelerate" in beyond


def test_train_step_benchmark_quick_run(tmp_path):
    results = run_quick("train_step.py", tmp_path / "train_step.json")
    for workload in ("cpu", "streamed_virtual_device"):
        assert results[workload]["first_loss_abs_diff"] < 1e-3, "the same weights, batch and masks"
        assert results[workload]["regions"] > 1
    assert results["streamed_virtual_device"]["devices"] == ["acc"]


def test_pipeline_benchmark_quick_run(tmp_path):
    results = run_quick("pipeline.py", tmp_path / "pipeline.json")
    assert len(results["stages"]) == 2 and results["microbatches"] == 8
    assert results["pipeline"]["samples_per_s"] > 0 and results["single_process"]["samples_per_s"] > 0
    for stage in results["stages"]:
        assert stage["predicted_microbatch_s"] > 0 and stage["measured_microbatch_s"] > 0


@pytest.mark.skipif(shutil.which("hey") is None, reason="the load generator hey is not installed (apt-get install hey)")
def test_serve_load_benchmark_quick_run(tmp_path):
    results = run_quick("serve_load.py", tmp_path / "serve.json")
    assert results["quick"] and results["server"]["exit_code"] == 0
    assert [run["workers"] for run in results["closed_loop"]] == [1, 4, 16, 64]
    assert all(run["errors_other_than_503"] == 0 and run["p50_ms"] > 0 for run in results["closed_loop"])
    assert [run["fraction"] for run in results["open_loop"]] == [0.5, 1.0, 1.5]


def test_overhead_benchmark_quick_run(tmp_path):
    results = run_quick("overhead.py", tmp_path / "overhead.json")
    assert set(results["executor_overhead"]) == {"native", "native_pool", "compiled_chain"}
    assert results["executor_overhead"]["compiled_chain"]["max_abs_error"] == 0
    for workload in results["latency"].values():
        assert workload["direct"]["uses_direct_path"] and not workload["executor"]["uses_direct_path"]
        assert workload["direct"]["max_abs_error"] < 1e-4
    assert results["machine"]["torch"] == __import__("torch").__version__


def test_compile_time_benchmark_quick_run_and_its_table(tmp_path):
    results = run_quick("compile_time.py", tmp_path / "compile_time.json", "--workloads", "gpt2_small")
    results_schema = bench_module("results_schema")
    tables_compile = bench_module("tables_compile")
    results_schema.validate(results)
    assert results["mode"] == "quick" and list(results["workloads"]) == ["gpt2_small"]
    gpt2 = results["workloads"]["gpt2_small"]
    assert len(gpt2["samples"]) == 2 and all(s["export_s"] > 0 and s["compile_s"] > 0 for s in gpt2["samples"])
    table = tables_compile.render(results, None)
    assert "| gpt2_small | latest" in table and f"{gpt2['ratio_of_medians']:.2f}x" in table


S1_KEYS = set("suite benchmark mode utc machine versions torch_threads settings workloads duration_s".split())
S1_SYSTEMS = {"eager", "torch_compile", "torch_compile_frozen", "onnxruntime", "tensortorrent"}
S1_SYSTEMS |= {"tensortorrent_inductor", "tensortorrent_auto"}
S1_OK_KEYS = {"status", "timing", "ratio_to_eager", "paired_ratios", "max_abs_error", "cosine", "argmax_agreement"}
S1_OK_KEYS |= {"build_s", "notes"}


def test_s1_fit_benchmark_quick_run(tmp_path):
    # Inductor's compiles are most of a quick run's time: the two compiled systems are left out here.
    results = run_quick("s1_fit.py", tmp_path / "s1.json", "--systems", "eager,onnxruntime,tensortorrent")
    assert set(results) == S1_KEYS
    assert (results["suite"], results["benchmark"], results["mode"]) == ("S1", "s1_fit", "quick")
    assert set(results["versions"]) == {"torch", "tensortorrent", "transformers", "onnxruntime", "onnx", "onnxscript"}
    assert set(results["workloads"]) == {"mlp_2048x8", "transformer_block", "gpt2_small", "resnet50"}
    onnxruntime_installed = importlib.util.find_spec("onnxruntime") is not None
    for name, workload in results["workloads"].items():
        systems = workload["systems"]
        assert set(systems) == S1_SYSTEMS, "no system is ever dropped"
        for system in ("torch_compile", "torch_compile_frozen", "tensortorrent_inductor", "tensortorrent_auto"):
            assert systems[system]["status"] == "skipped"
        for system in ("eager", "tensortorrent"):
            result = systems[system]
            assert result["status"] == "ok", (name, system, result.get("error"))
            assert set(result) == S1_OK_KEYS
            assert len(result["timing"]["samples_us"]) == results["settings"]["runs"]
            assert result["max_abs_error"] < 1e-4
            assert (result["cosine"] is not None) == (name == "gpt2_small")
        # Two eager calls may differ in the last bits: BLAS kernels take other paths on
        # buffers of another alignment, and compiling changes the process's heap.
        assert systems["eager"]["ratio_to_eager"] == 1.0 and systems["eager"]["max_abs_error"] < 1e-5
        assert systems["eager"]["paired_ratios"] == {}  # torch.compile was not selected
        paired = systems["tensortorrent"]["paired_ratios"]["eager"]
        assert paired["low"] <= paired["median"] <= paired["high"]
        onnx = systems["onnxruntime"]
        if not onnxruntime_installed:
            assert onnx["status"] == "missing" and "onnxruntime" in onnx["error"]
        elif onnx["status"] == "ok":
            assert onnx["max_abs_error"] < 1e-4 and "exporter" in onnx["notes"]
        else:
            assert onnx["status"] == "failed" and onnx["error"]


def test_s1_reports_a_missing_onnxruntime_as_missing(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import s1_fit

    real_find_spec = importlib.util.find_spec

    def find_spec(name, package=None):
        return None if name == "onnxruntime" else real_find_spec(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(s1_fit.Missing) as missing:
        s1_fit.build_onnxruntime(s1_fit.mlp(quick=True), tmp_path)
    assert s1_fit.not_ok(missing.value) == {
        "status": "missing",
        "error": "onnxruntime is not installed (pip install '.[bench]')",
    }


def test_artifact_load_benchmark_quick_run(tmp_path):
    results = run_quick("artifact_load.py", tmp_path / "artifact_load.json", "--dir", str(tmp_path))
    # A tolerance, not zero: BLAS kernels differ between machines (AMD vs Intel).
    assert results["max_abs_error"] < 1e-5
    for condition in ("warm", "cold"):
        assert set(results[condition]) == {"read_files_once", "load_compiled", "load_compiled_unverified"}
    assert [p.name for p in tmp_path.iterdir()] == ["artifact_load.json"], "the scratch artifact is removed"


def test_planner_benchmark_quick_run(tmp_path):
    results = run_quick("planner.py", tmp_path / "planner.json")
    # The search is held to within 1% of the exhaustive optimum (cpp/tests, docs/architecture.md).
    assert results["optimality"]["worst_gap"] <= 0.01
    real = results["greedy_real_model"]
    # Accelerate's placement is one the search ranks on the same simulated objective, and the
    # search is within 1% of the best of all placements (tests/e2e/test_planner_optimality.py).
    assert real["greedy_fits"] and real["greedy_value"] >= real["plan_value"] / 1.01
    assert real["greedy_devices"][0] == "fast" and real["greedy_devices"][-1] == "slow"
    assert {"cpu/mlp_1024x12_batch64", "declared/stack"} <= set(results["prediction"])
    assert all(row["predicted_s"] > 0 and row["measured_median_s"] > 0 for row in results["prediction"].values())


def test_the_planner_benchmark_fills_as_accelerate_does(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    from planner import accelerate_fill

    # Device 1 takes 60+30, is left when 50 does not fit, and is not refilled by the 10
    # that would; device 2 takes 50+10; 80 fits on neither and is offloaded to device 1.
    devices, resident = accelerate_fill([60, 30, 50, 10, 80], [(1, 100), (2, 70)])
    assert devices == [1, 1, 2, 2, 1]
    assert resident == [True, True, True, True, False]


def test_gpu_suite_exits_nonzero_naming_what_failed(tmp_path):
    # A device no machine here has: every part fails, is recorded, and the exit status says so.
    out = tmp_path / "s4.json"
    command = [sys.executable, str(ROOT / "bench" / "s4_gpu.py"), "--quick", "--out", str(out), "--device", "cuda:7"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "failed: fit_in_vram.mlp" in done.stderr and "failed: beyond_vram" in done.stderr
    recorded = json.loads(out.read_text())
    assert all("unknown device 'cuda:7'" in workload["failed"] for workload in recorded["fit_in_vram"].values())
    assert recorded["beyond_vram"]["failed"]["error"]

"""Load on `tensortorrent serve` over loopback, with `hey` (Debian's package) as the load
generator: a closed loop at each concurrency, an open loop at fractions of the capacity
the closed loop measured, and a soak at 0.8x capacity sampling the server's RSS and
open files. Every figure comes from hey's per-request CSV (latency percentiles, status
codes); the server's overhead is its p50 at concurrency 1 against calling the compiled
module directly in this process (same rows, same thread count).

    .venv/bin/python bench/serve_load.py              # about 13 minutes (a 10-minute soak)
    .venv/bin/python bench/serve_load.py --quick      # seconds: a smoke test, not a measurement
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import torch
from harness import machine, write_results
from torch import nn

import tensortorrent as tt

WIDTH, HIDDEN, BATCH = 256, 1024, 8
# hey's rate-limited workers send in step (each on its own ticker, all started at once), so
# an "open loop" of W workers arrives in bursts of W: the server's queue must hold a burst.
OPEN_WORKERS = 64


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(WIDTH, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, WIDTH)).eval()


def body(rows: int = 1) -> bytes:
    x = torch.randn(rows, WIDTH, generator=torch.Generator().manual_seed(1))
    tensor = {"name": "input_0", "shape": [rows, WIDTH], "datatype": "FP32", "data": x.flatten().tolist()}
    return json.dumps({"inputs": [tensor]}).encode()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(artifact: str, port: int, delay_us: int, queue: int) -> subprocess.Popen:
    command = [sys.executable, "-m", "tensortorrent.cli.main", "serve", "--model", f"mlp={artifact}"]
    command += ["--port", str(port), "--max-queue-delay-us", str(delay_us), "--max-queue-size", str(queue)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1):
                return server
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise RuntimeError("the server did not become ready in 60 s")


def hey(url: str, payload: Path, workers: int, seconds: float, rate_per_worker: float | None = None) -> dict:
    """One hey run: throughput, latency percentiles (ms) and status codes, from its CSV."""
    command = ["hey", "-z", f"{seconds}s", "-c", str(workers), "-m", "POST", "-T", "application/json"]
    command += ["-D", str(payload), "-o", "csv", "-t", "30"]
    if rate_per_worker is not None:
        command += ["-q", f"{rate_per_worker:.3f}"]
    done = subprocess.run([*command, url], capture_output=True, text=True, timeout=seconds + 120)
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    latencies = sorted(float(r["response-time"]) * 1e3 for r in rows if r["status-code"] == "200")
    codes: dict[str, int] = {}
    for r in rows:
        codes[r["status-code"]] = codes.get(r["status-code"], 0) + 1

    def percentile(p: float) -> float | None:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] if latencies else None

    return {
        "workers": workers,
        "seconds": seconds,
        "offered_per_s": rate_per_worker * workers if rate_per_worker else None,
        "requests": len(rows),
        "ok_per_s": len(latencies) / seconds,
        "p50_ms": percentile(0.50),
        "p95_ms": percentile(0.95),
        "p99_ms": percentile(0.99),
        "codes": codes,
        "errors_other_than_503": sum(n for code, n in codes.items() if code not in ("200", "503")),
    }


def process_figures(pid: int) -> tuple[int, int]:
    """(RSS bytes, open file descriptors) of process `pid`."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    rss_kib = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return rss_kib * 1024, len(os.listdir(f"/proc/{pid}/fd"))


def soak(url: str, payload: Path, pid: int, rate: float, seconds: float, every_s: float) -> dict:
    """hey at `rate` for `seconds`, the server's RSS and open files sampled every `every_s`."""
    workers = 16
    command = ["hey", "-z", f"{seconds}s", "-c", str(workers), "-q", f"{rate / workers:.3f}", "-m", "POST"]
    command += ["-T", "application/json", "-D", str(payload), "-o", "csv", url]
    # hey writes its CSV when it is done, more than a pipe holds: into a file, not a pipe.
    with tempfile.TemporaryFile("w+") as output:
        load = subprocess.Popen(command, stdout=output, stderr=subprocess.DEVNULL, text=True)
        samples, start = [], time.monotonic()
        while load.poll() is None:
            rss, files = process_figures(pid)
            samples.append({"t_s": round(time.monotonic() - start, 1), "rss_bytes": rss, "open_files": files})
            time.sleep(every_s)
        output.seek(0)
        rows = list(csv.DictReader(output))
    codes: dict[str, int] = {}
    for r in rows:
        codes[r["status-code"]] = codes.get(r["status-code"], 0) + 1
    settled = samples[len(samples) // 10 :] or samples  # after the first tenth: warm
    return {
        "rate_per_s": rate,
        "seconds": seconds,
        "codes": codes,
        "rss_first_bytes": settled[0]["rss_bytes"],
        "rss_last_bytes": settled[-1]["rss_bytes"],
        "rss_max_bytes": max(s["rss_bytes"] for s in settled),
        "open_files_first": settled[0]["open_files"],
        "open_files_last": settled[-1]["open_files"],
        "samples": samples,
    }


def direct_ms(compiled, rounds: int) -> float:
    """The compiled module called in this process on the rows one request brings, padded."""
    x = torch.cat([torch.randn(1, WIDTH), torch.zeros(BATCH - 1, WIDTH)])
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        compiled(x)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def line(run: dict) -> str:
    p50, p99 = (f"{run[k]:.1f}" if run[k] is not None else "-" for k in ("p50_ms", "p99_ms"))
    return f"{run['ok_per_s']:.0f}/s ok, p50 {p50} ms, p99 {p99} ms, codes {run['codes']}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short runs, no soak: a smoke test")
    parser.add_argument("--out", type=Path, help="write the JSON here only")
    parser.add_argument("--delay-us", type=int, default=2000, help="the server's --max-queue-delay-us")
    parser.add_argument("--queue", type=int, default=128, help="the server's --max-queue-size")
    args = parser.parse_args()
    if shutil.which("hey") is None:
        print("serve_load: needs hey (apt-get install hey)", file=sys.stderr)
        return 2
    started = datetime.now(timezone.utc)
    seconds = 2.0 if args.quick else 10.0
    soak_s, every_s = (4.0, 1.0) if args.quick else (600.0, 10.0)
    net = model()
    compiled = tt.compile(net, (torch.randn(BATCH, WIDTH),))
    with tempfile.TemporaryDirectory(prefix="tt-serve-load-") as folder:
        artifact = compiled.save(Path(folder) / "mlp")
        payload = Path(folder) / "request.json"
        payload.write_bytes(body())
        port = free_port()
        url = f"http://127.0.0.1:{port}/v2/models/mlp/infer"
        server = start_server(artifact, port, args.delay_us, args.queue)
        try:
            hey(url, payload, 4, 1.0)  # warm-up
            closed = [hey(url, payload, c, seconds) for c in (1, 4, 16, 64)]
            capacity = max(run["ok_per_s"] for run in closed)
            open_loop = [
                dict(hey(url, payload, OPEN_WORKERS, seconds, rate_per_worker=f * capacity / OPEN_WORKERS), fraction=f)
                for f in (0.5, 1.0, 1.5)
            ]
            soaked = soak(url, payload, server.pid, 0.8 * capacity, soak_s, every_s)
        finally:
            server.send_signal(signal.SIGTERM)
            exit_code = server.wait(timeout=60)
    direct = direct_ms(compiled, 50 if args.quick else 500)
    results = {
        "suite": "serve load",
        "quick": args.quick,
        "machine": machine(),
        "started": started.isoformat(),
        "model": f"Linear({WIDTH},{HIDDEN}) GELU Linear({HIDDEN},{WIDTH}), batch {BATCH}; requests of 1 row",
        "server": {"max_queue_delay_us": args.delay_us, "max_queue_size": args.queue, "exit_code": exit_code},
        "direct_call_p50_ms": direct,
        "closed_loop": closed,
        "capacity_per_s": capacity,
        "open_loop": open_loop,
        "soak": soaked,
        "overhead_p50_ms_at_concurrency_1": closed[0]["p50_ms"] - direct if closed[0]["p50_ms"] else None,
    }
    for path in write_results("serve", results, started, args.out):
        print(f"wrote {path}")
    print(f"direct call p50 {direct:.2f} ms; capacity {capacity:.0f} req/s")
    for run in closed:
        print(f"closed c={run['workers']:>3}: {line(run)}")
    for run in open_loop:
        print(f"open {run['fraction']}x: {line(run)}")
    print(
        f"soak: RSS {soaked['rss_first_bytes'] >> 20} -> {soaked['rss_last_bytes'] >> 20} MiB, "
        f"open files {soaked['open_files_first']} -> {soaked['open_files_last']}, {soaked['codes']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`tensortorrent serve`: the server started for real (uvicorn on a loopback port) and called
over HTTP, by hand and with Triton's own client: round trips per dtype against eager,
batching, backpressure, deadlines, disconnects, failures, auth and bad input. A probe op
that sleeps (conftest's hooks) makes a model slow where a test needs time to pass."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest
import torch
from torch import nn

import tensortorrent as tt
from conftest import ProbeChain, eager_outputs, sleep_then, wait_until

pytest.importorskip("fastapi")
from tensortorrent.serve.app import Server, ServeSettings  # noqa: E402
from tensortorrent.serve.server import uvicorn_server  # noqa: E402

WIDTH = 8


@contextmanager
def serving(models: dict, **settings):
    """A running server on a free loopback port: yields (its base URL, the Server, uvicorn's server)."""
    served = Server(models, ServeSettings(**settings))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn_server(served)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    assert wait_until(lambda: server.started, timeout_s=20), "the server did not start"
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", served, server
    finally:
        server.should_exit = True
        thread.join(20)
        served.close()
        sock.close()


def call(url: str, body: object = None, headers: dict | None = None, raw: bytes | None = None):
    """(status, headers (case-insensitive), JSON or text) of a GET, or of a POST when a body is given."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(url, data=data, headers=headers or {}, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            status, got, text = response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as error:
        status, got, text = error.code, error.headers, error.read().decode()
    try:
        return status, got, json.loads(text) if text else None
    except json.JSONDecodeError:
        return status, got, text


def infer_body(x: torch.Tensor, name: str = "input_0", datatype: str = "FP32", **extra) -> dict:
    values = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    return {"inputs": [{"name": name, "shape": list(x.shape), "datatype": datatype, "data": values.flatten().tolist()}]}


def output_of(reply: dict, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    (output,) = reply["outputs"]
    return torch.tensor(output["data"], dtype=dtype).reshape(output["shape"])


def metric(text: str, name: str, **labels) -> float:
    """The value of one sample of Prometheus text `text` (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}}") or (not labels and line.startswith(f"{name} ")):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture(scope="module")
def mlp():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(WIDTH, 16), nn.ReLU(), nn.Linear(16, 3)).eval()
    return model, tt.compile(model, (torch.randn(4, WIDTH),))


def slow_chain(hooks, batch: int, seconds: float):
    """A compiled ProbeChain whose every probe sleeps `seconds`."""
    torch.manual_seed(0)
    model = ProbeChain(stages=2, width=WIDTH).eval()
    compiled = tt.compile(model, (torch.randn(batch, WIDTH),), config=tt.CompileConfig(max_region_nodes=1))
    hooks.on_probe = sleep_then(seconds)
    hooks.calls = []  # not the regions that compiling timed (none where their profile was cached)
    return model, compiled


class Twice(nn.Module):
    def forward(self, x):
        return x.logical_not() if x.dtype == torch.bool else x + x


@pytest.mark.parametrize(
    "dtype, datatype",
    [
        (torch.float32, "FP32"),
        (torch.float64, "FP64"),
        (torch.float16, "FP16"),
        (torch.bfloat16, "BF16"),
        (torch.int64, "INT64"),
        (torch.int32, "INT32"),
        (torch.int16, "INT16"),
        (torch.int8, "INT8"),
        (torch.uint8, "UINT8"),
        (torch.bool, "BOOL"),
    ],
)
def test_each_datatype_round_trips_as_eager_computes_it(dtype, datatype):
    x = (torch.arange(6).reshape(2, 3) % 5).to(dtype)
    compiled = tt.compile(Twice(), (x,))
    with serving({"twice": compiled}) as (url, _, _):
        status, _, reply = call(f"{url}/v2/models/twice/infer", infer_body(x, datatype=datatype))
    assert status == 200, reply
    assert reply["outputs"][0]["datatype"] == datatype and reply["model_name"] == "twice"
    torch.testing.assert_close(output_of(reply, dtype), Twice()(x))


def test_the_routes_describe_the_server_and_the_model(mlp):
    _, compiled = mlp
    with serving({"mlp": compiled}) as (url, _, _):
        assert call(f"{url}/v2")[2]["name"] == "tensortorrent"
        assert call(f"{url}/v2/health/live")[0] == 200 and call(f"{url}/v2/health/ready")[0] == 200
        assert call(f"{url}/v2/models/mlp/ready")[0] == 200
        status, _, metadata = call(f"{url}/v2/models/mlp")
    assert status == 200
    assert metadata["inputs"] == [{"name": "input_0", "datatype": "FP32", "shape": [-1, WIDTH]}]
    assert metadata["outputs"] == [{"name": "output_0", "datatype": "FP32", "shape": [-1, 3]}]


def test_tritons_own_client_calls_it_with_json_and_with_binary_tensors(mlp):
    httpclient = pytest.importorskip("tritonclient.http")
    model, compiled = mlp
    x = torch.randn(3, WIDTH)
    with serving({"mlp": compiled}) as (url, _, _):
        client = httpclient.InferenceServerClient(url=url.removeprefix("http://"))
        assert client.is_server_live() and client.is_model_ready("mlp")
        assert client.get_model_metadata("mlp")["inputs"][0]["name"] == "input_0"
        results = []
        for binary in (False, True):  # binary: the client's default, raw bytes both ways
            given = httpclient.InferInput("input_0", list(x.shape), "FP32")
            given.set_data_from_numpy(x.numpy(), binary_data=binary)
            asked = [httpclient.InferRequestedOutput("output_0", binary_data=binary)]
            results.append(client.infer("mlp", [given], outputs=asked))
        given = httpclient.InferInput("input_0", list(x.shape), "FP32")
        given.set_data_from_numpy(x.numpy())
        results.append(client.infer("mlp", [given]))  # no outputs named: all of them, in binary
        client.close()
    for result in results:
        torch.testing.assert_close(torch.tensor(result.as_numpy("output_0")), eager_outputs(model, (x,)))


def test_binary_tensors_carry_bf16_and_bool_as_raw_bytes():
    x = torch.randn(2, 3).to(torch.bfloat16)
    compiled = tt.compile(Twice(), (x,))
    raw = x.view(torch.uint8).numpy().tobytes()
    header = {
        "inputs": [
            {"name": "input_0", "shape": [2, 3], "datatype": "BF16", "parameters": {"binary_data_size": len(raw)}}
        ],
        "outputs": [{"name": "output_0", "parameters": {"binary_data": True}}],
    }
    head = json.dumps(header).encode()
    with serving({"twice": compiled}) as (url, _, _):
        request = urllib.request.Request(
            f"{url}/v2/models/twice/infer", data=head + raw, headers={"Inference-Header-Content-Length": str(len(head))}
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            length = int(response.headers["Inference-Header-Content-Length"])
            body = response.read()
        short = dict(header, inputs=[dict(header["inputs"][0], parameters={"binary_data_size": 4})])
        head = json.dumps(short).encode()
        status, _, reply = call(
            f"{url}/v2/models/twice/infer", raw=head + raw, headers={"Inference-Header-Content-Length": str(len(head))}
        )
    (output,) = json.loads(body[:length])["outputs"]
    assert output["datatype"] == "BF16" and output["parameters"]["binary_data_size"] == len(raw)
    got = torch.frombuffer(bytearray(body[length:]), dtype=torch.uint8).view(torch.bfloat16).reshape(2, 3)
    torch.testing.assert_close(got, x + x)
    assert status == 400 and "takes 12 bytes; binary_data_size is 4" in reply["error"]


def test_concurrent_requests_are_batched_and_each_gets_its_own_rows(hooks):
    model, compiled = slow_chain(hooks, batch=4, seconds=0.05)
    rows = [torch.randn(1, WIDTH) for _ in range(8)]
    with serving({"chain": compiled}, max_queue_delay_us=200_000) as (url, _, _):
        with ThreadPoolExecutor(8) as pool:
            replies = list(pool.map(lambda x: call(f"{url}/v2/models/chain/infer", infer_body(x)), rows))
        metrics = call(f"{url}/metrics")[2]
    for x, (status, _, reply) in zip(rows, replies):
        assert status == 200, reply
        torch.testing.assert_close(output_of(reply), eager_outputs(model, (x.expand(4, WIDTH),))[:1])
    inferences = metric(metrics, "tt_inference_count_total", model="chain")
    executions = metric(metrics, "tt_execution_count_total", model="chain")
    assert inferences == 8 and executions < inferences


def test_a_full_queue_refuses_exactly_the_overflow_with_503(hooks):
    _, compiled = slow_chain(hooks, batch=1, seconds=0.3)
    with serving({"chain": compiled}, max_queue_size=2) as (url, served, _):
        with ThreadPoolExecutor(6) as pool:
            first = pool.submit(call, f"{url}/v2/models/chain/infer", infer_body(torch.randn(1, WIDTH)))
            while served.batchers["chain"].busy == 0 or hooks.calls == []:  # the first one is running
                time.sleep(0.01)
            rest = [
                pool.submit(call, f"{url}/v2/models/chain/infer", infer_body(torch.randn(1, WIDTH))) for _ in range(5)
            ]
            answers = [first.result()] + [f.result() for f in rest]
    statuses = sorted(status for status, _, _ in answers)
    assert statuses == [200, 200, 200, 503, 503, 503]
    refused = [a for a in answers if a[0] == 503]
    assert all(headers.get("Retry-After") == "1" and "queue is full" in reply["error"] for _, headers, reply in refused)


def test_a_request_whose_deadline_passes_in_the_queue_gets_504_and_never_runs(hooks):
    _, compiled = slow_chain(hooks, batch=1, seconds=0.4)
    with serving({"chain": compiled}) as (url, served, _):
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(call, f"{url}/v2/models/chain/infer", infer_body(torch.randn(1, WIDTH)))
            while hooks.calls == []:
                time.sleep(0.01)
            late = infer_body(torch.randn(1, WIDTH))
            late["parameters"] = {"timeout": 100_000}  # microseconds, as Triton's clients send it
            status, _, reply = call(f"{url}/v2/models/chain/infer", late)
            assert first.result()[0] == 200
        time.sleep(0.2)
        metrics = call(f"{url}/metrics")[2]
    assert status == 504 and "deadline" in reply["error"]
    assert metric(metrics, "tt_execution_count_total", model="chain") == 1
    assert hooks.calls == [0, 1], "the late request's regions never ran"


def test_a_request_whose_deadline_passes_while_it_runs_is_cancelled_at_an_instruction_boundary(hooks):
    _, compiled = slow_chain(hooks, batch=1, seconds=0.3)
    with serving({"chain": compiled}) as (url, _, _):
        late = infer_body(torch.randn(1, WIDTH))
        late["parameters"] = {"timeout": 150_000}  # its first region alone takes longer
        status, _, reply = call(f"{url}/v2/models/chain/infer", late)
        cancelled = wait_until(lambda: metric(call(f"{url}/metrics")[2], "tt_cancellations_total", model="chain") >= 1)
        assert cancelled, "the running call was not cancelled"
        metrics = call(f"{url}/metrics")[2]
    assert status == 504 and "deadline" in reply["error"]
    assert metric(metrics, "tt_rejections_total", model="chain", reason="timeout") == 1
    assert metric(metrics, "tt_execution_count_total", model="chain") == 0
    assert hooks.calls == [0], "the call stopped before its second region"


def test_a_client_that_goes_away_cancels_its_call_and_in_flight_returns_to_zero(hooks):
    _, compiled = slow_chain(hooks, batch=1, seconds=0.3)
    with serving({"chain": compiled}) as (url, _, _):
        host, port = url.removeprefix("http://").split(":")
        body = json.dumps(infer_body(torch.randn(1, WIDTH))).encode()
        with socket.create_connection((host, int(port))) as client:
            head = "POST /v2/models/chain/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            client.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
            while hooks.calls == []:
                time.sleep(0.01)
        wait_until(lambda: metric(call(f"{url}/metrics")[2], "tt_cancellations_total", model="chain") == 1)
        metrics = call(f"{url}/metrics")[2]
        assert metric(metrics, "tt_rejections_total", model="chain", reason="disconnected") == 1
        assert metric(metrics, "tt_cancellations_total", model="chain") == 1
        assert metric(metrics, "tt_in_flight", model="chain") == 0
        assert len(hooks.calls) < 2, "the call stopped at an instruction boundary"
        hooks.on_probe = None
        assert call(f"{url}/v2/models/chain/infer", infer_body(torch.randn(1, WIDTH)))[0] == 200


def test_a_failing_execution_fails_only_its_own_requests(hooks, mlp):
    _, compiled = slow_chain(hooks, batch=1, seconds=0.0)

    def fail(tag):
        raise RuntimeError("the device fell over")

    with serving({"chain": compiled}) as (url, _, _):
        hooks.on_probe = fail
        status, _, reply = call(f"{url}/v2/models/chain/infer", infer_body(torch.randn(1, WIDTH)))
        hooks.on_probe = None
        assert status == 500 and "the device fell over" in reply["error"]
        assert call(f"{url}/v2/models/chain/infer", infer_body(torch.randn(1, WIDTH)))[0] == 200


def test_bad_requests_are_named_and_disturb_nothing(mlp, tmp_path):
    _, compiled = mlp
    x = torch.randn(2, WIDTH)
    with serving({"mlp": compiled}, max_body_bytes=4096, api_key="s3cret") as (url, _, _):
        auth = {"Authorization": "Bearer s3cret"}
        infer = f"{url}/v2/models/mlp/infer"
        cases = [
            (infer_body(x), {}, 401, "bearer token"),
            (infer_body(x), {"Authorization": "Bearer wrong"}, 401, "bearer token"),
            (infer_body(torch.randn(2, 5)), auth, 400, "input 'input_0': expected shape [-1, 8], got [2, 5]"),
            (infer_body(torch.randn(5, WIDTH)), auth, 400, "expected 1 to 4 rows, got 5"),
            (infer_body(x.double(), datatype="FP64"), auth, 400, "expected datatype FP32, got 'FP64'"),
            (infer_body(x, name="x"), auth, 400, "unknown input 'x'"),
            ({"inputs": []}, auth, 400, "missing inputs ['input_0']"),
            (infer_body(torch.randn(64, WIDTH)), auth, 413, "limit"),
            (infer_body(torch.ones(1, WIDTH, dtype=torch.bool), datatype="FP32"), auth, 400, "holds true or false"),
            (infer_body(torch.full((1, WIDTH), 1e300, dtype=torch.float64)), auth, 400, "beyond its range"),
        ]
        for body, headers, status, message in cases:
            got, _, reply = call(infer, body, headers)
            assert (got, message in reply["error"]) == (status, True), (message, reply)
        got, _, reply = call(infer, raw=b"{not json", headers=auth)
        assert got == 400 and "not JSON" in reply["error"]
        got, _, reply = call(f"{url}/v2/models/nope/infer", infer_body(x), auth)
        assert got == 404 and "unknown model 'nope'" in reply["error"]
        assert call(f"{url}/v2/health/live")[0] == 200 and call(f"{url}/v2/health/ready")[0] == 200
        assert call(f"{url}/metrics")[0] == 401 and call(f"{url}/metrics", headers=auth)[0] == 200
        assert call(infer, infer_body(x), auth)[0] == 200


def test_an_output_json_cannot_carry_is_a_422_that_binary_data_answers():
    summing = nn.Linear(WIDTH, 1, bias=False).eval()
    nn.init.ones_(summing.weight)
    compiled = tt.compile(summing, (torch.randn(2, WIDTH),))
    huge = torch.full((1, WIDTH), 3e38)  # finite inputs whose sum overflows to inf
    with serving({"sum": compiled}) as (url, _, _):
        infer = f"{url}/v2/models/sum/infer"
        status, _, reply = call(infer, infer_body(huge))
        assert status == 422 and "output 'output_0' holds inf or nan" in reply["error"]
        binary = json.dumps({**infer_body(huge), "parameters": {"binary_data_output": True}}).encode()
        with urllib.request.urlopen(urllib.request.Request(infer, data=binary, method="POST"), timeout=60) as answer:
            head = int(answer.headers["Inference-Header-Content-Length"])
            raw = answer.read()[head:]
        assert torch.frombuffer(bytearray(raw), dtype=torch.float32).isinf().all()
        metrics = call(f"{url}/metrics")[2]
        assert metric(metrics, "tt_requests_total", code="422", model="sum") == 1, "counted as every answer is"


def test_a_model_streaming_its_weights_from_disk_under_a_ram_budget_serves_like_eager(tmp_path):
    from e2e.test_virtual_devices import BATCH, LAYER_BYTES, Stack

    torch.manual_seed(0)
    model = Stack().eval()
    config = tt.CompileConfig(ram_budget_bytes=3 * LAYER_BYTES, spill_dir=str(tmp_path))
    compiled = tt.compile(model, (torch.randn(BATCH, 256),), config=config)
    assert compiled._plane.streams
    assert 0 < served_tier_bytes(model, compiled, torch.randn(BATCH, 256), "ram") <= 3 * LAYER_BYTES


def served_tier_bytes(model, compiled, x: torch.Tensor, tier: str) -> float:
    """Serves `compiled` as "stack", checks one inference against eager, and returns the
    bytes its metrics say the call held on `tier`."""
    with serving({"stack": compiled}) as (url, _, _):
        status, _, reply = call(f"{url}/v2/models/stack/infer", infer_body(x))
        metrics = call(f"{url}/metrics")[2]
    assert status == 200
    torch.testing.assert_close(output_of(reply), eager_outputs(model, (x,)))
    return metric(metrics, "tt_tier_bytes", model="stack", tier=tier)


def test_an_artifact_compiled_for_a_device_serves_from_it(tmp_path):
    """The command loads each artifact onto the devices it was compiled for (here a virtual
    one, declared again from the manifest) and serves it like eager."""
    from e2e.test_virtual_devices import BATCH, LAYER_BYTES, Stack

    torch.manual_seed(0)
    model = Stack().eval()
    device = tt.VirtualDevice("vgpu", memory_bytes=4 * LAYER_BYTES, flops=1e12, link_bandwidth=1e10)
    compiled = tt.compile(model, (torch.randn(BATCH, 256),), devices=["vgpu"], machine=device)
    loaded = tt.load_compiled(compiled.save(tmp_path / "stack"))  # as `serve` loads it, no --devices
    assert 0 < served_tier_bytes(model, loaded, torch.randn(BATCH, 256), "vgpu") <= device.memory_bytes


def test_sigterm_turns_readiness_off_and_lets_the_running_request_finish(hooks):
    model, compiled = slow_chain(hooks, batch=1, seconds=0.3)
    x = torch.randn(1, WIDTH)
    with serving({"chain": compiled}) as (url, served, server):
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(call, f"{url}/v2/models/chain/infer", infer_body(x))
            while hooks.calls == []:
                time.sleep(0.01)
            server.handle_exit(signal.SIGTERM, None)  # as the signal handler would
            assert served.ready is False
            status, _, reply = running.result()
    assert status == 200
    torch.testing.assert_close(output_of(reply), eager_outputs(model, (x,)))


def test_the_command_serves_an_artifact_and_exits_0_on_sigterm(mlp, tmp_path):
    model, compiled = mlp
    artifact = compiled.save(tmp_path / "mlp")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "tensortorrent.cli.main", "serve", "--model", f"mlp={artifact}", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "TT_SERVE_API_KEY": ""},
    )
    try:
        url = f"http://127.0.0.1:{port}"

        def ready_or_exited() -> bool:
            try:
                return process.poll() is not None or call(f"{url}/v2/health/ready")[0] == 200
            except OSError:
                return False

        wait_until(ready_or_exited, timeout_s=60, every_s=0.1)
        if process.poll() is not None:
            pytest.fail(f"the server exited: {process.stdout.read().decode()}")
        x = torch.randn(4, WIDTH)
        status, _, reply = call(f"{url}/v2/models/mlp/infer", infer_body(x))
        assert status == 200
        torch.testing.assert_close(output_of(reply), eager_outputs(model, (x,)))
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_port_in_use_or_out_of_range_is_one_line_before_any_model_loads(tmp_path, capsys):
    from tensortorrent.cli.main import main

    missing = f"m={tmp_path / 'no-artifact'}"  # never loaded: the port fails first
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--model", missing, "--port", str(port)]) == 2
        assert f"serve: cannot listen on 127.0.0.1:{port}: Address already in use" in capsys.readouterr().err
    assert main(["serve", "--model", missing, "--port", "99999"]) == 2
    assert "serve: port: expected 0 to 65535, got 99999" in capsys.readouterr().err

"""Serving under faults (issue 45): a load of well-formed requests mixed with malformed
ones and clients that hang up halfway through their body, against a model streaming its
weights from an artifact whose weights file is deleted midway. Every well-formed request
gets eager's answer, the process's open files and RSS stay flat, and /metrics counts each
failure by its kind."""

from __future__ import annotations

import json
import os
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import torch
from e2e.test_serve import call, infer_body, metric, output_of, serving
from e2e.test_streaming import deep_mlp, weight_bytes

import tensortorrent as tt
from conftest import eager_outputs, wait_until

REQUESTS = 400
MALFORMED = [  # (body, what the error names): one of each kind in turn
    (b"{not json", "not JSON"),
    (json.dumps(infer_body(torch.randn(2, 5))).encode(), "expected shape"),
    (json.dumps(infer_body(torch.randn(2, 128).double(), datatype="FP64")).encode(), "expected datatype FP32"),
    (json.dumps({"inputs": []}).encode(), "missing inputs"),
]


def open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


def open_files_once_at_most(limit: int) -> int:
    """This process's open files once they are `limit` or fewer, else after a while: the
    server's thread closes its end of a connection just after the client has read the answer."""
    wait_until(lambda: open_files() <= limit)
    return open_files()


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def hang_up_mid_body(url: str, body: bytes) -> None:
    """Sends the headers and half of `body`, then closes the connection."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as client:
        head = "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        client.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body[: len(body) // 2])


def test_well_formed_requests_all_succeed_among_malformed_ones_hang_ups_and_a_deleted_weights_file(tmp_path):
    model, path = deep_mlp(), tmp_path / "mlp"
    tt.compile(model, (torch.randn(4, 128),)).save(path)
    compiled = tt.load_compiled(path, config=tt.CompileConfig(ram_budget_bytes=weight_bytes(model) // 3))
    assert compiled._plane.streams, "the weights are read from the artifact's file on every call"
    inputs = [torch.randn(1 + i % 4, 128) for i in range(REQUESTS)]
    expected = [eager_outputs(model, (x,)) for x in inputs]
    deleted = threading.Event()

    def request(i: int):
        if i == REQUESTS // 2:
            os.remove(path / "weights.safetensors")  # what the module has open stays readable
            deleted.set()
        if i % 20 == 7:
            body, _ = MALFORMED[(i // 20) % len(MALFORMED)]
            return call(f"{url}/v2/models/mlp/infer", raw=body)
        if i % 20 == 13:
            hang_up_mid_body(url, json.dumps(infer_body(inputs[i])).encode())
            return None
        return call(f"{url}/v2/models/mlp/infer", infer_body(inputs[i]))

    with serving({"mlp": compiled}) as (url, _, _):
        for i in range(8):  # warm: the pools, caches and connections of a first load
            assert call(f"{url}/v2/models/mlp/infer", infer_body(inputs[i]))[0] == 200
        files, rss = open_files(), rss_bytes()
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(request, range(REQUESTS)))
        metrics = call(f"{url}/metrics")[2]
        files_after, rss_after = open_files_once_at_most(files), rss_bytes()
    assert deleted.is_set()
    wrong = []
    for i, answer in enumerate(answers):
        if i % 20 == 7:
            _, message = MALFORMED[(i // 20) % len(MALFORMED)]
            if answer[0] != 400 or message not in answer[2]["error"]:
                wrong.append(f"malformed request {i}: {answer}")
        elif i % 20 != 13 and (answer[0] != 200 or not torch.allclose(output_of(answer[2]), expected[i], 1e-4, 1e-5)):
            wrong.append(f"request {i}: {answer[0]} {answer[2] if answer[0] != 200 else 'a wrong answer'}")
    assert wrong == []
    malformed = sum(1 for i in range(REQUESTS) if i % 20 == 7)
    hung_up = sum(1 for i in range(REQUESTS) if i % 20 == 13)
    good = REQUESTS - malformed - hung_up + 8
    assert metric(metrics, "tt_requests_total", code="200", model="mlp") == good
    assert metric(metrics, "tt_requests_total", code="400", model="mlp") == malformed
    assert metric(metrics, "tt_rejections_total", model="mlp", reason="disconnected") == hung_up
    assert files_after <= files, "no connection, file or descriptor outlives its request"
    assert rss_after - rss < 48 << 20, f"RSS grew by {rss_after - rss} bytes over {REQUESTS} requests"

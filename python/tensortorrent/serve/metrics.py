"""The server's Prometheus metrics (prefix tt_), in a registry of its own per server."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class ServeMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "tt_requests", "Inference requests answered, by model and HTTP code", ["model", "code"], registry=r
        )
        self.request_seconds = Histogram(
            "tt_request_duration_seconds",
            "Time from a request's arrival to its answer",
            ["model"],
            buckets=SECONDS,
            registry=r,
        )
        self.queue_seconds = Histogram(
            "tt_queue_duration_seconds",
            "Time a request waited in its model's queue",
            ["model"],
            buckets=SECONDS,
            registry=r,
        )
        self.compute_seconds = Histogram(
            "tt_compute_duration_seconds",
            "Time one execution (a batch) of a model took",
            ["model"],
            buckets=SECONDS,
            registry=r,
        )
        self.batch_size = Histogram(
            "tt_batch_size", "Requests per execution", ["model"], buckets=(1, 2, 4, 8, 16, 32, 64, 128), registry=r
        )
        self.inferences = Counter("tt_inference_count", "Requests executed, by model", ["model"], registry=r)
        self.executions = Counter("tt_execution_count", "Executions (batches) run, by model", ["model"], registry=r)
        self.queue_depth = Gauge("tt_queue_depth", "Requests waiting, by model", ["model"], registry=r)
        self.in_flight = Gauge("tt_in_flight", "Requests being handled, by model", ["model"], registry=r)
        self.rejections = Counter(
            "tt_rejections", "Requests refused or cut short, by model and reason", ["model", "reason"], registry=r
        )
        self.cancellations = Counter(
            "tt_cancellations", "Executions cancelled through their call handle, by model", ["model"], registry=r
        )
        self.first_token_seconds = Histogram(
            "tt_time_to_first_token_seconds",
            "Time from a generation request's arrival to its first token",
            ["model"],
            buckets=SECONDS,
            registry=r,
        )
        self.generated_tokens = Counter("tt_generated_tokens", "Tokens generated, by model", ["model"], registry=r)
        self.decode_tokens_per_s = Histogram(
            "tt_decode_tokens_per_second",
            "A generation's tokens per second after its first",
            ["model"],
            buckets=(0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000),
            registry=r,
        )
        self.tier_bytes = Gauge(
            "tt_tier_bytes", "Peak bytes of the last execution per memory tier, by model", ["model", "tier"], registry=r
        )

    def answered(self, model: str, status: int, arrived: float) -> None:
        """Counts a request answered with `status`, `arrived` (time.monotonic()) when it came."""
        self.requests.labels(model, str(status)).inc()
        self.request_seconds.labels(model).observe(time.monotonic() - arrived)

    def text(self) -> bytes:
        return generate_latest(self.registry)

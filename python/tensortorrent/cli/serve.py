"""`tensortorrent serve`: serve compiled artifacts over the KServe v2 HTTP protocol."""

from __future__ import annotations

import argparse
import os

from ..errors import InvalidArgumentError, UnsupportedError

API_KEY_ENV = "TT_SERVE_API_KEY"


def add_parser(commands) -> None:
    parser = commands.add_parser("serve", help="serve compiled artifacts over HTTP (KServe v2 protocol)")
    parser.add_argument(
        "--model", action="append", default=[], metavar="NAME=DIR", help="a model to serve from an artifact directory"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000, help="port to bind (default 8000)")
    parser.add_argument("--max-queue-size", type=int, default=64, help="requests waiting per model before 503")
    parser.add_argument("--max-queue-delay-us", type=int, default=0, help="how long a batch waits for more requests")
    parser.add_argument("--timeout-s", type=float, default=30.0, help="a request's deadline unless it asks for one")
    parser.add_argument("--max-timeout-s", type=float, default=300.0, help="the longest deadline a request may ask")
    parser.add_argument("--max-body-bytes", type=int, default=64 << 20, help="larger request bodies get 413")
    parser.add_argument("--drain-timeout-s", type=float, default=30.0, help="how long SIGTERM waits for requests")
    parser.add_argument(
        "--api-key-file", metavar="PATH", help=f"a file holding the bearer token (else ${API_KEY_ENV}; else none)"
    )
    parser.set_defaults(run=run)


def settings_of(args: argparse.Namespace):
    from ..serve.app import ServeSettings

    for flag in ("max_queue_size", "max_body_bytes"):
        if getattr(args, flag) < 1:
            raise InvalidArgumentError(f"serve: --{flag.replace('_', '-')}: expected an integer >= 1")
    if args.max_queue_delay_us < 0:
        raise InvalidArgumentError("serve: --max-queue-delay-us: expected an integer >= 0")
    if not 0 < args.timeout_s <= args.max_timeout_s:
        raise InvalidArgumentError(
            f"serve: expected 0 < --timeout-s <= --max-timeout-s, got {args.timeout_s} and {args.max_timeout_s}"
        )
    return ServeSettings(
        max_queue_size=args.max_queue_size,
        max_queue_delay_us=args.max_queue_delay_us,
        timeout_s=args.timeout_s,
        max_timeout_s=args.max_timeout_s,
        max_body_bytes=args.max_body_bytes,
        api_key=api_key(args.api_key_file),
        drain_timeout_s=args.drain_timeout_s,
    )


def api_key(path: str | None) -> str | None:
    """The bearer token: the file's first line, else the environment's, else None."""
    if path is not None:
        with open(path, encoding="utf-8") as file:
            key = file.readline().strip()
        if not key:
            raise InvalidArgumentError(f"serve: --api-key-file {path}: the file holds no token")
        return key
    return os.environ.get(API_KEY_ENV) or None


def models_of(specs: list[str]) -> dict[str, str]:
    if not specs:
        raise InvalidArgumentError("serve: expected at least one --model NAME=DIR")
    models: dict[str, str] = {}
    for spec in specs:
        name, sep, directory = spec.partition("=")
        if not sep or not name or not directory:
            raise InvalidArgumentError(f"serve: --model: expected NAME=DIR, got {spec!r}")
        if name in models:
            raise InvalidArgumentError(f"serve: --model: {name!r} named twice")
        models[name] = directory
    return models


def run(args: argparse.Namespace) -> int:
    try:
        from ..serve.app import Server
        from ..serve.server import serve_forever
    except ImportError as error:
        raise UnsupportedError(
            f"serve: needs the serve extra ({error.name} is missing): pip install 'tensortorrent[serve]'"
        ) from None
    from ..artifact.load import load_compiled

    directories = models_of(args.model)
    settings = settings_of(args)
    models = {name: load_compiled(directory) for name, directory in directories.items()}
    print(f"serving {', '.join(sorted(models))} on http://{args.host}:{args.port}/v2", flush=True)
    serve_forever(Server(models, settings), args.host, args.port)
    return 0

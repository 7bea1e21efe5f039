"""`tensortorrent serve`: serve compiled artifacts over the KServe v2 HTTP protocol.

Settings come from the command line, else from a TOML file (`--config serve.toml`: the
same names with underscores, and a [models] table of NAME = "DIR"), else the defaults.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys

from ..errors import InvalidArgumentError, UnsupportedError

API_KEY_ENV = "TT_SERVE_API_KEY"
# name: (type, default, help)
OPTIONS: dict[str, tuple[type, object, str]] = {
    "host": (str, "127.0.0.1", "address to bind (default 127.0.0.1: this machine only)"),
    "port": (int, 8000, "port to bind (default 8000)"),
    "max_queue_size": (int, 64, "requests waiting per model before 503 (default 64)"),
    "max_queue_delay_us": (int, 0, "how long a batch waits for more requests (default 0)"),
    "timeout_s": (float, 30.0, "a request's deadline unless it asks for one (default 30)"),
    "max_timeout_s": (float, 300.0, "the longest deadline a request may ask (default 300)"),
    "max_body_bytes": (int, 64 << 20, "larger request bodies get 413 (default 64 MiB)"),
    "drain_timeout_s": (float, 30.0, "how long SIGTERM waits for running requests (default 30)"),
    "api_key_file": (str, None, f"a file holding the bearer token (else ${API_KEY_ENV}; else none)"),
    "devices": (
        str,
        None,
        "where the models compute: 'cpu', 'auto' (the CPU and every GPU found) or names joined by commas "
        "('cpu,cuda:0'); default: the devices each artifact was compiled for that this machine has",
    ),
}


def add_parser(commands) -> None:
    parser = commands.add_parser("serve", help="serve compiled artifacts over HTTP (KServe v2 protocol)")
    parser.add_argument(
        "--model", action="append", default=[], metavar="NAME=DIR", help="a model to serve from an artifact directory"
    )
    parser.add_argument("--config", metavar="PATH", help="a TOML file with these settings and a [models] table")
    for name, (kind, _, text) in OPTIONS.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=kind, default=None, help=text)
    parser.set_defaults(run=run)


def read_config(path: str) -> dict:
    """The settings of a TOML file, checked: known names, the right types."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        with open(path, "rb") as file:
            data = tomllib.load(file)
    except tomllib.TOMLDecodeError as error:
        raise InvalidArgumentError(f"serve: --config {path}: not TOML: {error}") from None
    unknown = sorted(set(data) - set(OPTIONS) - {"models"})
    if unknown:
        raise InvalidArgumentError(f"serve: --config {path}: unknown settings {unknown}; known: {sorted(OPTIONS)}")
    for name, value in data.items():
        wanted = OPTIONS[name][0] if name != "models" else dict
        accepted = (int, float) if wanted is float else wanted  # a whole number of seconds is fine
        if not isinstance(value, accepted) or isinstance(value, bool):
            raise InvalidArgumentError(
                f"serve: --config {path}: {name}: expected {wanted.__name__}, got {type(value).__name__} ({value!r})"
            )
    models = data.get("models", {})
    if not all(isinstance(d, str) for d in models.values()):
        raise InvalidArgumentError(f'serve: --config {path}: [models]: expected NAME = "DIR" entries')
    return data


def resolved(args: argparse.Namespace) -> tuple[dict[str, str], dict]:
    """The models (name -> artifact directory) and every setting, flags over the file over defaults."""
    config = read_config(args.config) if args.config else {}
    settings = {}
    for name, (kind, default, _) in OPTIONS.items():
        flag = getattr(args, name)
        settings[name] = flag if flag is not None else kind(config[name]) if name in config else default
    models = dict(config.get("models", {}))
    for name, directory in models_of(args.model).items():
        if name in models:
            raise InvalidArgumentError(f"serve: model {name!r} is named by --model and in {args.config}")
        models[name] = directory
    if not models:
        raise InvalidArgumentError("serve: expected at least one --model NAME=DIR (or a [models] table in --config)")
    return models, settings


def settings_of(settings: dict):
    from ..serve.app import ServeSettings

    for name in ("max_queue_size", "max_body_bytes"):
        if settings[name] < 1:
            raise InvalidArgumentError(f"serve: {name}: expected an integer >= 1, got {settings[name]}")
    if settings["max_queue_delay_us"] < 0:
        raise InvalidArgumentError(f"serve: max_queue_delay_us: expected >= 0, got {settings['max_queue_delay_us']}")
    timeout, longest = settings["timeout_s"], settings["max_timeout_s"]
    if not 0 < timeout <= longest:
        raise InvalidArgumentError(f"serve: expected 0 < timeout_s <= max_timeout_s, got {timeout} and {longest}")
    return ServeSettings(
        max_queue_size=settings["max_queue_size"],
        max_queue_delay_us=settings["max_queue_delay_us"],
        timeout_s=settings["timeout_s"],
        max_timeout_s=settings["max_timeout_s"],
        max_body_bytes=settings["max_body_bytes"],
        api_key=api_key(settings["api_key_file"]),
        drain_timeout_s=settings["drain_timeout_s"],
    )


def devices_of(setting: str | None) -> str | list[str] | None:
    """load_compiled's `devices` from the setting: None, 'cpu', 'auto', or a list of names."""
    if setting is None or setting in ("cpu", "auto"):
        return setting
    names = [name.strip() for name in setting.split(",")]
    if not all(names):
        raise InvalidArgumentError(f"serve: devices: expected device names joined by commas, got {setting!r}")
    return names


def api_key(path: str | None) -> str | None:
    """The bearer token: the file's first line, else the environment's, else None."""
    if path is not None:
        with open(path, encoding="utf-8") as file:
            key = file.readline().strip()
        if not key:
            raise InvalidArgumentError(f"serve: api_key_file {path}: the file holds no token")
        return key
    return os.environ.get(API_KEY_ENV) or None


def models_of(specs: list[str]) -> dict[str, str]:
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
    from ..load import load_compiled

    directories, settings = resolved(args)
    served = settings_of(settings)
    devices = devices_of(settings["devices"])
    host, port = settings["host"], settings["port"]
    with listening_socket(host, port) as listener:  # before the models load: a port in use fails at once
        models = {name: load_compiled(directory, devices=devices) for name, directory in directories.items()}
        print(f"serving {', '.join(sorted(models))} on http://{host}:{listener.getsockname()[1]}/v2", flush=True)
        serve_forever(Server(models, served), listener)
    return 0


def listening_socket(host: str, port: int) -> socket.socket:
    if not 0 <= port <= 65535:
        raise InvalidArgumentError(f"serve: port: expected 0 to 65535, got {port}")
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        return socket.create_server((host, port), family=family)
    except OSError as error:
        raise InvalidArgumentError(f"serve: cannot listen on {host}:{port}: {error.strerror or error}") from None

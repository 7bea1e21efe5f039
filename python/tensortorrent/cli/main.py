"""Entry point of the `tensortorrent` command."""

from __future__ import annotations

import argparse
import logging
import sys
import traceback

from ..errors import TensorTorrentError
from . import cache, demo, doctor, explain, export_pipeline, generate, quantize, serve, validate

USER_ERROR_STATUS = 2  # as argparse exits on a bad command line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tensortorrent", description=__doc__)
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log compile stages; show the traceback of an error"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    cache.add_parser(commands)
    demo.add_parser(commands)
    doctor.add_parser(commands)
    explain.add_parser(commands)
    export_pipeline.add_parser(commands)
    generate.add_parser(commands)
    quantize.add_parser(commands)
    serve.add_parser(commands)
    validate.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, format="%(name)s: %(message)s")
    try:
        return args.run(args)
    except (TensorTorrentError, OSError) as error:
        # A bad path, artifact or setting is the user's to fix: say what, not where in our code.
        if args.verbose:
            traceback.print_exc()
        print(f"tensortorrent: error: {_one_line(error)}", file=sys.stderr)
        return USER_ERROR_STATUS


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if isinstance(error, TensorTorrentError) else f"{type(error).__name__}: {text}"


if __name__ == "__main__":
    sys.exit(main())

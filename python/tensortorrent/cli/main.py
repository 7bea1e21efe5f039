"""Entry point of the `tensortorrent` command."""

from __future__ import annotations

import argparse
import logging
import sys

from . import demo, doctor, validate


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tensortorrent", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log compile stages")
    commands = parser.add_subparsers(dest="command", required=True)
    demo.add_parser(commands)
    doctor.add_parser(commands)
    validate.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, format="%(name)s: %(message)s")
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())

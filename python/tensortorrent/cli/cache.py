"""`tensortorrent cache list|clear`: the weights cache that compiles under a RAM budget write."""

from __future__ import annotations

import argparse
import os

from ..errors import InvalidArgumentError
from ..hardware.budgets import DEFAULT_SPILL_DIR
from ..storage.weights_cache import cache_directory, cached_files, clear_cache
from ..units import format_bytes


def add_parser(commands) -> None:
    parser = commands.add_parser("cache", help="list or clear the weights cache of streamed compiles")
    parser.add_argument("action", choices=["list", "clear"])
    parser.add_argument(
        "--spill-dir",
        default=None,
        help=f"the spill_dir the compiles used (default: TT_SPILL_DIR, else {DEFAULT_SPILL_DIR})",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    directory = cache_directory(args.spill_dir)
    for folder in (os.path.dirname(directory), directory):
        if os.path.exists(folder) and not os.path.isdir(folder):
            raise InvalidArgumentError(f"cache: {folder} is a file, not a spill directory")
    if args.action == "clear":
        files, freed = clear_cache(directory)
        print(f"removed {files} file(s), {format_bytes(freed)}, from {directory}")
        return 0
    files = cached_files(directory)
    for path in files:
        print(f"{format_bytes(os.path.getsize(path)):>10}  {path}")
    print(f"{len(files)} file(s), {format_bytes(sum(os.path.getsize(p) for p in files))} in {directory}")
    return 0

"""`tensortorrent quantize SRC DST`: a checkpoint's linear layers written once as int8 or int4."""

from __future__ import annotations

import argparse
import os

from ..compression import quantize_checkpoint
from ..config import GROUP_SIZES, WEIGHT_FORMATS
from ..units import format_bytes


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "quantize",
        help="write a checkpoint's linear layers as int8 or int4, for compiles in that weight_format to read",
    )
    parser.add_argument("src", help="a Hugging Face checkpoint folder (with its config.json) or .safetensors file")
    parser.add_argument("dst", help="the folder to write (new, or empty)")
    parser.add_argument("--weight-format", default="int8", choices=WEIGHT_FORMATS, help="the format (default: int8)")
    parser.add_argument(
        "--group-size", type=int, default=128, choices=GROUP_SIZES, help="int4: inputs sharing a scale (default: 128)"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    folder = quantize_checkpoint(args.src, args.dst, args.weight_format, group_size=args.group_size)
    size = sum(os.path.getsize(os.path.join(folder, name)) for name in os.listdir(folder))
    print(f"wrote {folder} ({format_bytes(size)}, {args.weight_format})")
    return 0

"""`tensortorrent export-pipeline ARTIFACT DIR --stages N`: a saved artifact as pipeline
stages for torchrun (see tensortorrent/pipeline/export.py)."""

from __future__ import annotations

import argparse

from ..artifact import load_compiled


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "export-pipeline", help="split a saved artifact into pipeline stages that torchrun runs, one process each"
    )
    parser.add_argument("artifact", help="an artifact directory written by compiled.save()")
    parser.add_argument("directory", help="where to write the stages, pp_plan.json and torchrun.sh")
    parser.add_argument("--stages", type=int, required=True, help="how many stages (processes)")
    parser.add_argument(
        "--microbatches", type=int, default=None, help="microbatches per call, at least the stages (default: as many)"
    )
    parser.add_argument(
        "--link-bandwidth",
        type=float,
        default=None,
        help="bytes/s between ranks that stages are balanced for (default: this machine's loopback, measured)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    compiled = load_compiled(args.artifact)
    command = compiled.export_pipeline(args.directory, args.stages, args.microbatches, args.link_bandwidth)
    print(f"wrote {args.stages} stage(s) to {args.directory}; run them with:\n  {command}")
    return 0

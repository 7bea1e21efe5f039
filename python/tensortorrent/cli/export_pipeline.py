"""`tensortorrent export-pipeline ARTIFACT DIR --stages N`: a saved artifact as pipeline
stages for torchrun (see tensortorrent/pipeline/export.py)."""

from __future__ import annotations

import argparse
import json
import os

from ..load import load_compiled
from ..pipeline.export import PLAN
from ..units import format_bytes


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
    # The stages run on the CPU (gloo): the artifact is loaded there, whatever it was compiled for.
    compiled = load_compiled(args.artifact, devices="cpu")
    command = compiled.export_pipeline(args.directory, args.stages, args.microbatches, args.link_bandwidth)
    with open(os.path.join(args.directory, PLAN), encoding="utf-8") as file:
        plan = json.load(file)
    print(
        f"{plan['num_stages']} stage(s), {plan['n_microbatches']} microbatches, schedule {plan['schedule']}; "
        f"link {format_bytes(plan['link_bytes_per_s'])}/s ({plan['link']})"
    )
    for stage in plan["stages"]:
        print(
            f"  stage {stage['index']}: regions {stage['regions'][0]} .. {stage['regions'][-1]}, "
            f"weights {format_bytes(stage['parameter_bytes'])}, boundary {format_bytes(stage['boundary_bytes'])}, "
            f"predicted {stage['predicted_s'] * 1e3:.2f} ms per microbatch"
        )
    print(f"wrote {args.directory}; run it with:\n  {command}")
    return 0

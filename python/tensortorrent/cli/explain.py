"""`tensortorrent explain ARTIFACT`: a saved artifact's plan, and whether this machine would replay it.

Only the manifest is read (its digest checked against integrity.json unless --no-verify),
never the weights or the program, so a large artifact explains in milliseconds.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..artifact.devices import saved_devices
from ..artifact.integrity import list_files, read_file, read_integrity
from ..artifact.layout import MANIFEST
from ..errors import ArtifactError, TensorTorrentError
from ..hardware import hardware_fingerprint
from ..load.compiled import check_load_arguments, parse_manifest
from ..load.program import replay_decision, saved_parts
from ..observe.explain import explain_saved
from ..planning import plan_from_json


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "explain", help="show a saved artifact's plan and whether this machine would replay or re-plan it"
    )
    parser.add_argument("artifact", help="an artifact directory written by compiled.save()")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON on stdout instead")
    parser.add_argument(
        "--no-verify", action="store_true", help="do not check the manifest's digest against integrity.json"
    )
    parser.set_defaults(run=run)


def read_manifest(path: str, verify: bool) -> tuple[str, dict[str, Any]]:
    """The artifact's directory and its checked manifest; ArtifactError when either is bad."""
    directory = check_load_arguments(path, None, verify)
    present = list_files(directory)
    records = read_integrity(directory, present) if verify else None
    raw = read_file(directory, MANIFEST, records[MANIFEST] if records is not None else None)
    return directory, parse_manifest(raw)


def verdict(manifest: dict[str, Any]) -> dict[str, Any]:
    """What tt.load_compiled would do here with the artifact's own config (the rule is
    load.replay_decision's): replay the saved plan, or partition and plan again."""
    replay, reason = replay_decision(manifest, same_config=True)
    return {
        "action": "replay" if replay else "re-plan",
        "saved_fingerprint": manifest["hardware_fingerprint"].get("digest"),
        "this_fingerprint": hardware_fingerprint()["digest"],
        "reason": reason + (" matches" if replay else ""),
    }


def checked_plan(directory: str, manifest: dict[str, Any]):
    """The saved plan, or ArtifactError when the regions, plan or schedule are malformed."""
    regions = manifest["regions"]
    try:
        plan = plan_from_json(manifest["plan"], manifest["schedule"])
        if not all(
            isinstance(r, dict) and isinstance(r["index"], int) and isinstance(r["operations"], list) for r in regions
        ):
            raise ValueError("each region needs an int index and a list of operations")
        if len(plan.devices) != len(regions):
            raise ValueError(f"{len(plan.devices)} device entries for {len(regions)} regions")
    except (KeyError, TypeError, ValueError, TensorTorrentError) as error:
        raise ArtifactError(f"{directory}/{MANIFEST}: unreadable regions, plan or schedule ({error})") from error
    return plan


def run(args: argparse.Namespace) -> int:
    directory, manifest = read_manifest(args.artifact, verify=not args.no_verify)
    _, signature = saved_parts(manifest)
    plan = checked_plan(directory, manifest)
    decision = verdict(manifest)
    if args.json:
        data = {
            "artifact": directory,
            "model_name": manifest["model_name"],
            "tensortorrent": manifest["tensortorrent"],
            "torch": manifest["torch"],
            "inputs": manifest["signature"],
            "config": manifest["config"],
            "devices": [name for name, _ in saved_devices(manifest)],
            "plan": manifest["plan"],
            "regions": manifest["regions"],
            "schedule": manifest["schedule"],
            "predicted_costs": manifest["predicted_costs"],
            "on_this_machine": decision,
        }
        print(json.dumps(data, indent=2))
    else:
        action = "the saved plan would be replayed" if decision["action"] == "replay" else "it would be re-planned"
        devices = ", ".join(name + (" (virtual)" if virtual else "") for name, virtual in saved_devices(manifest))
        print(explain_saved(manifest, signature.describe(), devices, plan, f"{action} ({decision['reason']})"))
    return 0

"""Crash consistency (issue 45): a save, or a weights-cache write, SIGKILLed at random
moments leaves the old or the new version whole, never a half one, and the next write
removes what the killed one left. `make test` kills each 20 times; TT_KILLS=200 for the
full count (see docs/reliability.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("kill_worker.py")
KILLS = int(os.environ.get("TT_KILLS", "20"))


@pytest.mark.parametrize("operation", ["save", "cache"])
def test_random_kills_leave_a_whole_old_or_new_version_and_the_next_write_cleans_up(tmp_path, operation):
    run = subprocess.run(
        [sys.executable, str(WORKER), operation, str(tmp_path), str(KILLS)],
        capture_output=True,
        text=True,
        timeout=60 + 5 * KILLS,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    print(operation, summary)  # the counts, for the record (pytest -s)
    assert summary["problems"] == []
    assert summary["old"] + summary["new"] == KILLS

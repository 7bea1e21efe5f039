"""SIGKILLs a write at random moments, for tests/e2e/test_kills.py.

python kill_worker.py save DIR KILLS    a forked child saves a new artifact over an old one
                                        in DIR, again and again, until killed
python kill_worker.py cache DIR KILLS   a forked child writes the weights cache in DIR,
                                        again and again, until killed

After each kill, at a random moment within one write's duration, it checks what a user may
rely on: the old artifact or the new one is there whole (the cache: the whole file or none),
and the next write succeeds and leaves nothing else behind. The children are forked from a
process that imported torch and compiled once, so that a kill costs milliseconds, not an
import. Prints one JSON summary line.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time

import torch
from safetensors.torch import load_file
from torch import nn

import tensortorrent as tt
from tensortorrent.capture.program import BoundTensor
from tensortorrent.storage.weights_cache import cache_weights, cached_files, clear_cache


def model(seed: int) -> nn.Module:
    """About 8 MiB of weights, so that a write takes long enough to be killed in its middle."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024)).eval()


def killed_at_random(write, seconds: float, rng: random.Random) -> float:
    """Forks a child that calls write() until killed and kills it after a random delay of
    up to 1.5 `seconds` (one write's duration: every moment of a write is a candidate, and
    a child's first write, slowed by copy-on-write faults, is not killed only early);
    returns the delay."""
    child = os.fork()
    if child == 0:  # the child: write until killed, never return into the caller's code
        try:
            while True:
                write()
        finally:
            os._exit(1)
    delay = rng.uniform(0.0, 1.5 * seconds)
    time.sleep(delay)
    os.kill(child, signal.SIGKILL)
    os.waitpid(child, 0)
    return delay


def duration(write) -> float:
    start = time.perf_counter()
    write()
    return time.perf_counter() - start


class Save:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.x = torch.randn(2, 1024)
        self.old, self.new = (tt.compile(model(seed), (self.x,), devices="cpu") for seed in (1, 2))
        self.expected = {"old": self.old(self.x), "new": self.new(self.x)}
        self.target = os.path.join(directory, "artifact")
        self.old.save(self.target)

    def write(self) -> None:
        self.new.save(self.target)

    def after_kill(self) -> tuple[str, list[str]]:
        """Which artifact is there ("old" or "new"), and what is wrong."""
        got = tt.load_compiled(self.target)(self.x)
        found = next((name for name, want in self.expected.items() if torch.allclose(got, want, 1e-4, 1e-5)), "mixed")
        self.old.save(self.target)  # the next save succeeds, and removes what the killed one left
        left = sorted(set(os.listdir(self.directory)) - {"artifact"})
        return found, [f"left {left}"] * bool(left) + ["the artifact is neither old nor new"] * (found == "mixed")


class CacheWrite:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        state = model(3).state_dict()
        self.bound = [BoundTensor(slot, (name,), "parameter", t) for slot, (name, t) in enumerate(state.items())]

    def write(self) -> None:
        clear_cache(self.directory)
        cache_weights(self.bound, self.directory, disk_budget=1 << 40)

    def after_kill(self) -> tuple[str, list[str]]:
        """Whether the killed write had published the file ("new") or not ("old": none)."""
        published = [path for path in cached_files(self.directory) if path.endswith(".safetensors")]
        found = "new" if published else "old"
        cached = cache_weights(self.bound, self.directory, disk_budget=1 << 40)  # reuses a whole file
        problems = []
        if published and not cached.reused:
            problems.append("a published file was not reused whole")
        tensors = load_file(cached.path)
        if any(not torch.equal(tensors[b.names[0]], b.tensor) for b in self.bound):
            problems.append("the cached tensors differ from the model's")
        left = [os.path.basename(p) for p in cached_files(self.directory) if not p.startswith(cached.path)]
        return found, problems + [f"left {left}"] * bool(left)


if __name__ == "__main__":
    operation, folder, kills = sys.argv[1], sys.argv[2], int(sys.argv[3])
    torch.set_num_threads(1)  # no OpenMP team in the parent: forked children stay sound
    rng = random.Random(45)
    case = {"save": Save, "cache": CacheWrite}[operation](folder)
    seconds = max(duration(case.write) for _ in range(3))
    summary = {"kills": kills, "write_s": round(seconds, 4), "old": 0, "new": 0, "problems": []}
    with torch.no_grad():
        for kill in range(kills):
            delay = killed_at_random(case.write, seconds, rng)
            found, problems = case.after_kill()
            summary[found] = summary.get(found, 0) + 1
            summary["problems"] += [f"kill {kill} after {delay:.4f} s: {problem}" for problem in problems]
    print(json.dumps(summary))

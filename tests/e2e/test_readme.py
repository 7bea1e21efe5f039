"""The Python examples of the README and of every page under docs/ run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


def test_readme_python_blocks_run(capsys):
    blocks = python_blocks(README)
    assert blocks, "the README has a quickstart"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})
    assert "Direct path" in capsys.readouterr().out


@pytest.mark.parametrize("page", [p for p in PAGES if p != README and python_blocks(p)], ids=lambda p: p.name)
def test_docs_python_blocks_run(page):
    for block in python_blocks(page):
        exec(compile(block, str(page), "exec"), {})

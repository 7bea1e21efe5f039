"""The README's Python examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_blocks_run(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "the README has a quickstart"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})
    assert "Direct path" in capsys.readouterr().out

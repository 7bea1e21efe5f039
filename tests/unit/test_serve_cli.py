"""`tensortorrent serve`'s command line: what it needs is named, before anything loads."""

from __future__ import annotations

import pytest

from tensortorrent.cli.main import main


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "expected at least one --model NAME=DIR"),
        (["--model", "nodir"], "--model: expected NAME=DIR, got 'nodir'"),
        (["--model", "a=x", "--model", "a=y"], "'a' named twice"),
        (["--model", "a=x", "--max-queue-size", "0"], "--max-queue-size: expected an integer >= 1"),
        (["--model", "a=x", "--timeout-s", "500"], "expected 0 < --timeout-s <= --max-timeout-s, got 500.0 and 300.0"),
    ],
)
def test_bad_command_lines_are_named(argv, message, capsys):
    assert main(["serve", *argv]) == 2
    assert message in capsys.readouterr().err


def test_an_empty_token_file_is_refused(tmp_path, capsys):
    empty = tmp_path / "token"
    empty.write_text("\n")
    assert main(["serve", "--model", "a=x", "--api-key-file", str(empty)]) == 2
    assert "the file holds no token" in capsys.readouterr().err


def test_a_missing_artifact_is_named(tmp_path, capsys):
    assert main(["serve", "--model", f"a={tmp_path / 'nowhere'}"]) == 2
    assert "nowhere" in capsys.readouterr().err

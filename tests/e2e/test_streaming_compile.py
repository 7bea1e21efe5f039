"""tt.compile under a RAM budget its model's weights exceed: weights cached once on disk, streamed."""

from __future__ import annotations

import os

import pytest
import torch
from e2e.test_streaming import deep_mlp, weight_bytes

import tensortorrent as tt
from conftest import eager_outputs
from tensortorrent.cli.main import main


def compile_streamed(model, x, spill_dir, budget, **config):
    return tt.compile(model, (x,), config=tt.CompileConfig(ram_budget_bytes=budget, spill_dir=str(spill_dir), **config))


def test_weights_are_cached_once_streamed_and_the_cache_is_cleared(tmp_path, capsys):
    model, x = deep_mlp(), torch.randn(4, 128)
    budget = weight_bytes(model) // 3
    compiled = compile_streamed(model, x, tmp_path, budget)
    torch.testing.assert_close(compiled(x), eager_outputs(model, (x,)))
    assert compiled.last_report.bytes_read > 0 and compiled.last_peak_bytes["ram"] <= budget
    (cached,) = [p for p in (tmp_path / "weights").iterdir() if p.suffix == ".safetensors"]
    written = cached.stat().st_mtime_ns
    again = compile_streamed(model, x, tmp_path, budget)  # the same weights: the file is reused
    torch.testing.assert_close(again(x), eager_outputs(model, (x,)))
    assert cached.stat().st_mtime_ns == written
    assert main(["cache", "list", "--spill-dir", str(tmp_path)]) == 0
    assert cached.name in capsys.readouterr().out
    assert main(["cache", "clear", "--spill-dir", str(tmp_path)]) == 0
    assert "removed 2 file(s)" in capsys.readouterr().out
    assert list((tmp_path / "weights").iterdir()) == []


def test_loads_from_the_cache_check_their_tensors_crc32c(tmp_path):
    model, x = deep_mlp(), torch.randn(4, 128)
    compiled = compile_streamed(model, x, tmp_path, weight_bytes(model) // 3)
    torch.testing.assert_close(compiled(x), eager_outputs(model, (x,)))
    assert compiled._plane.io.stats().ranges_checksummed > 0, "the file was just written: checked, not trusted"
    (cached,) = [p for p in (tmp_path / "weights").iterdir() if p.suffix == ".safetensors"]
    place = next(iter(compiled._plane.plan.streamed.values()))[0]
    offset = compiled._plane.weights.ranges[place.slot].offset + 8
    with open(cached, "r+b") as file:  # one byte of a streamed tensor, changed in place
        file.seek(offset)
        good = file.read(1)
        file.seek(offset)
        file.write(bytes([good[0] ^ 0x40]))
    with pytest.raises(tt.StorageError, match=cached.name + r": bytes \[\d+, \d+\) fail their crc32c checksum"):
        compiled(x)


def test_a_disk_budget_too_small_for_the_cache_fails_and_leaves_nothing(tmp_path):
    model, x = deep_mlp(), torch.randn(4, 128)
    with pytest.raises(tt.MemoryCapacityError, match="weights cache needs .* disk budget allows 1000"):
        compile_streamed(model, x, tmp_path, weight_bytes(model) // 3, disk_budget_bytes=1000)
    assert not (tmp_path / "weights").exists() or list((tmp_path / "weights").iterdir()) == []


def test_a_streamed_compile_saves_a_whole_artifact(tmp_path):
    model, x = deep_mlp(), torch.randn(4, 128)
    compiled = compile_streamed(model, x, tmp_path / "spill", weight_bytes(model) // 3)
    compiled.save(tmp_path / "artifact")
    loaded = tt.load_compiled(tmp_path / "artifact")
    torch.testing.assert_close(loaded(x), eager_outputs(model, (x,)))
    assert os.path.getsize(tmp_path / "artifact" / "weights.safetensors") >= weight_bytes(model)


def test_new_weights_are_refused_where_calls_read_them_from_disk(tmp_path):
    model, x = deep_mlp(), torch.randn(4, 128)
    compiled = compile_streamed(model, x, tmp_path, weight_bytes(model) // 3)
    expected = eager_outputs(model, (x,))
    halved = {name: value * 0.5 for name, value in compiled.state_dict().items()}
    with pytest.raises(tt.UnsupportedFeatureError, match=r"load_state_dict\(\) cannot be combined with .*streamed"):
        compiled.load_state_dict(halved)
    torch.testing.assert_close(compiled(x), expected)
    with torch.no_grad():
        next(model.parameters()).mul_(0.5)
    with pytest.raises(tt.UnsupportedFeatureError, match="changing a parameter in place .* compile it again"):
        compiled(x)

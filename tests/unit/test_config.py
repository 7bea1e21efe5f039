"""CompileConfig and TT_* variables are validated strictly, naming the field."""

from __future__ import annotations

import pytest

import tensortorrent as tt
from tensortorrent.config import env_flag


@pytest.mark.parametrize(
    "field, value",
    [
        ("max_region_nodes", 2.5),
        ("max_region_nodes", True),
        ("max_region_nodes", "8"),
        ("prefer_direct_path", 1),
        ("stall_timeout_s", "10"),
        ("stall_timeout_s", False),
        ("max_concurrent_regions", 1.0),
        ("ram_budget_bytes", 2.0**30),
        ("vram_budget_bytes", "1GiB"),
        ("cpu_budget", True),
        ("spill_dir", 3),
    ],
)
def test_wrong_type_raises_type_error_naming_the_field(field, value):
    with pytest.raises(TypeError, match=field) as caught:
        tt.CompileConfig(**{field: value})
    assert isinstance(caught.value, tt.ConfigTypeError)
    assert isinstance(caught.value, tt.TensorTorrentError)


@pytest.mark.parametrize(
    "field, value",
    [
        ("max_region_nodes", 0),
        ("stall_timeout_s", 0),
        ("stall_timeout_s", -1.0),
        ("stall_timeout_s", float("inf")),
        ("stall_timeout_s", float("nan")),
        ("max_concurrent_regions", 0),
        ("ram_budget_bytes", 0),
        ("disk_budget_bytes", -5),
        ("cpu_budget", 0),
        ("spill_dir", ""),
    ],
)
def test_wrong_value_raises_value_error_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field) as caught:
        tt.CompileConfig(**{field: value})
    assert isinstance(caught.value, tt.ConfigValueError)


def test_valid_config_keeps_its_values():
    config = tt.CompileConfig(max_region_nodes=4, prefer_direct_path=False, stall_timeout_s=2, max_concurrent_regions=3)
    assert config.as_dict() == {
        "max_region_nodes": 4,
        "prefer_direct_path": False,
        "stall_timeout_s": 2,
        "max_concurrent_regions": 3,
        "ram_budget_bytes": None,
        "vram_budget_bytes": None,
        "disk_budget_bytes": None,
        "cpu_budget": None,
        "spill_dir": None,
    }


def test_env_flag(monkeypatch):
    monkeypatch.delenv("TT_DIRECT_PATH", raising=False)
    assert env_flag("TT_DIRECT_PATH") is None
    monkeypatch.setenv("TT_DIRECT_PATH", "1")
    assert env_flag("TT_DIRECT_PATH") is True
    monkeypatch.setenv("TT_DIRECT_PATH", "0")
    assert env_flag("TT_DIRECT_PATH") is False
    monkeypatch.setenv("TT_DIRECT_PATH", "yes")
    with pytest.raises(tt.ConfigValueError, match="TT_DIRECT_PATH.*'yes'"):
        env_flag("TT_DIRECT_PATH")

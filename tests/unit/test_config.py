"""CompileConfig and TT_* variables are validated strictly, naming the field."""

from __future__ import annotations

import pytest

import tensortorrent as tt
from tensortorrent.environment import env_flag


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
        ("prefetch_distance", 1.0),
        ("io_queue_depth", "4"),
        ("allow_disk_streaming", 1),
        ("activation_budget_bytes", 1.5e6),
        ("allow_tmpfs_spill", "yes"),
        ("allow_training", 1),
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
        ("prefetch_distance", -1),
        ("io_queue_depth", 0),
        ("io_queue_depth", 1025),
        ("spill_dir", __file__),
        ("activation_budget_bytes", 0),
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
        "objective": "latency",
        "objective_weights": None,
        "prefetch_distance": None,
        "io_queue_depth": None,
        "allow_disk_streaming": True,
        "activation_budget_bytes": None,
        "allow_tmpfs_spill": False,
        "allow_training": False,
        "region_backend": "eager",
        "validate_numerics": None,
        "atol": None,
        "rtol": None,
        "weight_format": None,
        "group_size": 128,
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


def test_objectives_by_member_or_name():
    assert tt.CompileConfig().objective is tt.Objective.LATENCY
    assert tt.CompileConfig(objective="Memory").objective is tt.Objective.MEMORY
    weighted = tt.CompileConfig(objective=tt.Objective.WEIGHTED, objective_weights={"memory": 2})
    assert weighted.objective_weights == {"latency": 0.0, "throughput": 0.0, "memory": 2.0}
    assert weighted.as_dict()["objective"] == "weighted"
    assert tt.CompileConfig(**weighted.as_dict()) == weighted  # artifacts store the dict


@pytest.mark.parametrize(
    ("fields", "error", "match"),
    [
        ({"objective": "fastest"}, tt.ConfigValueError, "expected one of latency, throughput"),
        ({"objective": 3}, tt.ConfigTypeError, "expected a tt.Objective or its name, got int"),
        ({"objective": "weighted"}, tt.ConfigValueError, "objective=WEIGHTED needs them, .* got none"),
        ({"objective": "weighted", "objective_weights": [1.0]}, tt.ConfigTypeError, "expected a dict"),
        ({"objective": "weighted", "objective_weights": {}}, tt.ConfigValueError, "got an empty dict"),
        ({"objective_weights": {"latency": 1.0}}, tt.ConfigValueError, "only used with objective=Objective.WEIGHTED"),
        ({"objective": "weighted", "objective_weights": {"speed": 1}}, tt.ConfigValueError, "expected keys among"),
        ({"objective": "weighted", "objective_weights": {"memory": -1}}, tt.ConfigValueError, ">= 0, got -1"),
        ({"objective": "weighted", "objective_weights": {"memory": "1"}}, tt.ConfigTypeError, "expected a number"),
        ({"objective": "weighted", "objective_weights": {"memory": 0}}, tt.ConfigValueError, "at least one weight"),
    ],
)
def test_bad_objectives_are_named(fields, error, match):
    with pytest.raises(error, match=match):
        tt.CompileConfig(**fields)

"""Partition: the normalized graph cut into regions, each compiled to its own kernel."""

from .region_module import build_region_module
from .regions import Region, layer_paths, parameter_owners, partition, regions_from_names

__all__ = ["Region", "build_region_module", "layer_paths", "parameter_owners", "partition", "regions_from_names"]

"""Pipeline stages for torch.distributed.pipelining: the export (export.py) and the runner
each rank runs (runner.py, `python -m tensortorrent.pipeline DIR`)."""

from ..runtime.compiled_module import register_pipeline_exporter
from .export import export_pipeline

register_pipeline_exporter(export_pipeline)

__all__ = ["export_pipeline"]

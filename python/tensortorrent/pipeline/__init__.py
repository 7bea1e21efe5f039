"""Pipeline stages for torch.distributed.pipelining: the export (export.py, which
compiled.export_pipeline() calls) and the runner each rank runs (runner.py,
`python -m tensortorrent.pipeline DIR`)."""

"""`tensortorrent serve`: compiled artifacts behind the KServe v2 inference protocol
(app.py), with dynamic batching, backpressure and deadlines per model (batcher.py)."""

# TensorTorrent's server on the CPU. Build: `docker build -t tensortorrent .`; run with the
# artifact directories mounted read-only under /models and named with --model (see
# docker-compose.yaml and deploy/k8s/). The root file system may be read-only: the
# server writes only under /var/cache/tensortorrent (TT_SPILL_DIR), a volume.

# The wheels, the C++ core compiled here (scikit-build-core fetches CMake and ninja itself).
FROM python:3.12-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends g++ && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml CMakeLists.txt README.md ./
COPY cpp cpp
COPY python python
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[serve]"

# The server: no compiler, a user of its own.
FROM python:3.12-slim
RUN useradd --create-home --uid 10001 tt \
    && mkdir -p /var/cache/tensortorrent /models && chown tt /var/cache/tensortorrent
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index /wheels/*.whl && rm -rf /wheels
USER 10001
ENV TT_SPILL_DIR=/var/cache/tensortorrent PYTHONDONTWRITEBYTECODE=1
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/v2/health/live', timeout=2)"]
# SIGTERM turns readiness off, lets running requests finish (--drain-timeout-s), exits 0.
STOPSIGNAL SIGTERM
ENTRYPOINT ["tensortorrent", "serve", "--host", "0.0.0.0", "--port", "8000"]
CMD ["--model", "model=/models/model"]

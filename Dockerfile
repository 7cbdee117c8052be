# gpuplan service image: `docker build -t gpuplan .` (or `podman build`) then
#   docker run -p 8000:8000 -v gpuplan-data:/data gpuplan
# Settings come from GPUPLAN_* variables (e.g. -e GPUPLAN_API_TOKEN=... -e GPUPLAN_WORKERS=4).
# Kubernetes manifests: deploy/.
ARG BASE=python:3.11-slim
FROM ${BASE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
# Dependencies first, in their own layer: it is rebuilt only when pyproject.toml changes,
# not on every source edit. Every runtime wheel (ortools, highspy, pulp with its CBC
# binary) is prebuilt: no compiler.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
 && python -m pip install -r /tmp/requirements.txt && rm /tmp/requirements.txt

# Then the sources, installed without touching the dependencies.
COPY README.md ./
COPY models ./models
COPY solver ./solver
COPY heuristics ./heuristics
COPY api ./api
COPY benchmarks ./benchmarks
RUN python -m pip install --no-deps . && rm -rf /src/build

RUN useradd --create-home --uid 10001 --user-group --shell /usr/sbin/nologin gpuplan \
 && mkdir -p /data && chown gpuplan:gpuplan /data
USER 10001
WORKDIR /data
ENV GPUPLAN_DB_PATH=/data/gpuplan.db
VOLUME ["/data"]
EXPOSE 8000

HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; r = urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4); sys.exit(0 if r.status == 200 else 1)"]

CMD ["gpuplan", "serve", "--host", "0.0.0.0", "--port", "8000"]

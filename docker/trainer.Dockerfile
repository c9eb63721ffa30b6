# Training worker image: python -m training.train (one process per worker; TF_CONFIG from the
# Kubernetes manifests, Vertex AI or Kubeflow). tensorflow[and-cuda] brings the CUDA and cuDNN
# libraries as wheels, so a slim Python base suffices; the host provides the NVIDIA driver.
# Build from the repository root: docker build -f docker/trainer.Dockerfile -t trainer .
# PYTHON_IMAGE: the base (scripts/images.sh passes a local stand-in where registries cannot be
# reached); EXTRAS=cpu builds a CPU-only trainer (no CUDA wheels, ~2.5 GB smaller).
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm
FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY beam_jobs beam_jobs
COPY training training
COPY shardspec shardspec
COPY runspec runspec
COPY stageconfig stageconfig
COPY orchestration orchestration
COPY datacheck datacheck
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
ARG EXTRAS=gpu
# TF_CPU_ALLOCATOR_USE_BFC: see training/worker_env.py
ENV PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=1 TF_CPU_ALLOCATOR_USE_BFC=true
COPY --from=build /wheels /wheels
COPY constraints.txt /tmp/constraints.txt
# The gpu extra pins tensorflow[and-cuda] to the same TensorFlow as the CPU lock.
# pip 23 (the bases' own) cannot resolve the pinned set: upgrade it first, as make install does.
RUN WHEEL="$(ls /wheels/*.whl)" \
    && pip install --no-cache-dir pip==26.3 \
    && pip install --no-cache-dir -c /tmp/constraints.txt "${WHEEL}[${EXTRAS}]" \
    && rm -rf /wheels /tmp/constraints.txt \
    && useradd --create-home --uid 1000 trainer
USER 1000
WORKDIR /home/trainer
ENTRYPOINT ["python", "-m", "training.train"]

# Custom Beam SDK container for Dataflow (or Flink/Spark portable runners) workers:
# --sdk_container_image=<this image> with --runner DataflowRunner. The workers import
# beam_jobs and shardspec, which write the records without TensorFlow, so the image
# installs no TensorFlow (about 500 MB and 9 s of import per worker process).
# Build from the repository root: docker build -f docker/beam.Dockerfile -t beam-worker .
# PYTHON_IMAGE and BEAM_IMAGE: the bases (scripts/images.sh passes local stand-ins where registries
# cannot be reached).
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm
ARG BEAM_IMAGE=apache/beam_python3.11_sdk:2.77.0
FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY beam_jobs beam_jobs
COPY training training
COPY shardspec shardspec
COPY stageconfig stageconfig
COPY orchestration orchestration
COPY datacheck datacheck
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# Same Beam and Python versions as constraints.txt, or the job fails at submission.
FROM ${BEAM_IMAGE}
COPY --from=build /wheels /wheels
COPY constraints.txt /tmp/constraints.txt
# pip 23 (the bases' own) cannot resolve the pinned set: upgrade it first, as make install does.
RUN WHEEL="$(ls /wheels/*.whl)" \
    && pip install --no-cache-dir pip==26.3 \
    && pip install --no-cache-dir -c /tmp/constraints.txt "${WHEEL}[beam]" \
    && rm -rf /wheels /tmp/constraints.txt
# The base image's entry point (/opt/apache/beam/boot) starts the SDK harness.

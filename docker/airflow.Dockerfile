# Airflow 3 with the project's DAGs, providers and libraries. By default without TensorFlow:
# the scheduler, API server and workers shard (Beam) and publish, and with the kubernetes or
# vertex launcher the trainers evaluate where they train. The local launcher trains and
# evaluates on the Airflow worker: docker/compose.yaml builds one worker from the `training`
# stage (this image plus TensorFlow, one more layer on top of it, so the two images share every
# other layer: ~1.5 GB more on disk, not a second 4 GB image) and sends those two tasks to its
# queue. Build from the repository root:
#   docker build -f docker/airflow.Dockerfile -t imagepipe-airflow .
#   docker build -f docker/airflow.Dockerfile --target training -t imagepipe-airflow-training .
# PYTHON_IMAGE and AIRFLOW_IMAGE: the bases (scripts/images.sh passes local stand-ins where registries
# cannot be reached).
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm
ARG AIRFLOW_IMAGE=apache/airflow:3.3.2-python3.11
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

FROM ${AIRFLOW_IMAGE} AS airflow
# postgres and celery: compose.yaml's metadata database and executor (installed here, pinned,
# rather than taken from whatever the base bundles).
COPY --from=build /wheels /wheels
COPY constraints.txt /opt/imagepipe/constraints.txt
# pip 23 (the bases' own) cannot resolve the pinned set: upgrade it first, as make install does.
RUN WHEEL="$(ls /wheels/*.whl)" \
    && pip install --no-cache-dir pip==26.3 \
    && pip install --no-cache-dir -c /opt/imagepipe/constraints.txt "${WHEEL}[beam,airflow,postgres,celery]"
COPY --chown=airflow:0 dags /opt/airflow/dags
# compose.yaml mounts a named volume at /data: an empty volume takes this folder's owner, so
# the airflow user can write runs and models there.
USER 0
RUN mkdir -p /data && chown airflow:0 /data
USER 50000

# The training worker's image: the `cpu` extra (TensorFlow) on top of the image above; pip finds
# the project and everything else installed and adds TensorFlow and what it needs only.
FROM airflow AS training
RUN pip install --no-cache-dir -c /opt/imagepipe/constraints.txt "$(ls /wheels/*.whl)[cpu]"

# The default target: the image without TensorFlow (stages it does not need are skipped).
FROM airflow

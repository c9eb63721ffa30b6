# Airflow 3 with the project's DAGs, providers and libraries (the tasks import beam_jobs and
# training at run time; the local training launcher and evaluation run TensorFlow on CPU).
# Build from the repository root: docker build -f docker/airflow.Dockerfile -t imagepipe-airflow .
FROM python:3.11.7-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY beam_jobs beam_jobs
COPY training training
COPY shardspec shardspec
COPY stageconfig stageconfig
COPY orchestration orchestration
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM apache/airflow:3.3.2-python3.11
COPY --from=build /wheels /wheels
COPY constraints.txt /opt/imagepipe/constraints.txt
RUN WHEEL="$(ls /wheels/*.whl)" \
    && pip install --no-cache-dir -c /opt/imagepipe/constraints.txt "${WHEEL}[beam,cpu,airflow]"
COPY --chown=airflow:0 dags /opt/airflow/dags

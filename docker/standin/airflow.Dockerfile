# A local stand-in for apache/airflow:3.3.2-python3.11, for machines that cannot pull it
# (scripts/images.sh builds it only then): the official image's user (airflow, uid 50000,
# group 0), AIRFLOW_HOME and `airflow` entry point on the Debian Python stand-in. Airflow
# itself comes from the project wheel's `airflow` extra, pinned by constraints.txt, as it
# does on top of the official image. Not here: the official entry point's extras (dumb-init,
# waiting for the database, _AIRFLOW_DB_MIGRATE); compose runs `db migrate` as its own service.
ARG PYTHON_IMAGE=localhost/imagepipe-standin/python:3.11-bookworm
FROM ${PYTHON_IMAGE}
# As the official image: pip installs as the airflow user into ~/.local.
ENV AIRFLOW_HOME=/opt/airflow PIP_USER=true PATH=/home/airflow/.local/bin:${PATH}
RUN useradd --uid 50000 --gid 0 --create-home airflow \
    && mkdir -p /opt/airflow \
    && chown -R airflow:0 /opt/airflow
USER 50000
WORKDIR /opt/airflow
ENTRYPOINT ["airflow"]
CMD ["version"]

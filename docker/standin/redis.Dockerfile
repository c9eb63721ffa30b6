# A local stand-in for redis:7.4.2-bookworm, for machines that cannot pull it (scripts/images.sh
# builds it only then): Debian's redis-server (7.0) and redis-cli; compose.yaml's command runs
# it (as root: the official image drops to its redis user with gosu, which Debian does not ship).
ARG PYTHON_IMAGE=localhost/imagepipe-standin/python:3.11.7-bookworm
FROM ${PYTHON_IMAGE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends redis-server=5:7.* \
    && rm -rf /var/lib/apt/lists/*

CMD ["redis-server"]

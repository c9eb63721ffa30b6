# A local stand-in for postgres:15-bookworm, for machines that cannot pull it (scripts/images.sh
# builds it only then): Debian's PostgreSQL 15 and an entry point that does what the official
# one does with POSTGRES_USER, POSTGRES_PASSWORD and POSTGRES_DB on an empty data directory.
ARG PYTHON_IMAGE=localhost/imagepipe-standin/python:3.11.7-bookworm
FROM ${PYTHON_IMAGE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends postgresql-15=15.* \
    && rm -rf /var/lib/apt/lists/*
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
ENV PGDATA=/var/lib/postgresql/data PATH=/usr/lib/postgresql/15/bin:${PATH}
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint.sh"]

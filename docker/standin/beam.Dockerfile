# A local stand-in for apache/beam_python3.11_sdk:2.77.0, for machines that cannot pull it
# (scripts/images.sh builds it only then): the Debian Python stand-in, root as in the official
# image. Apache Beam itself comes from the project wheel's `beam` extra, pinned by
# constraints.txt. Not here: the official entry point /opt/apache/beam/boot (Beam's Go
# program that starts the SDK harness for Dataflow or a portable runner's DOCKER environment),
# so this image runs the job with a local runner (`python -m beam_jobs.shard_images`) only.
ARG PYTHON_IMAGE=localhost/imagepipe-standin/python:3.11-bookworm
FROM ${PYTHON_IMAGE}
WORKDIR /
ENTRYPOINT ["python"]

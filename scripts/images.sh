#!/usr/bin/env bash
# The project's container images, built and run with podman on this machine or any Linux one:
#   scripts/images.sh build [trainer beam airflow airflow-training]  (default: all four)
#       -> imagepipe-trainer:local, imagepipe-beam:local, imagepipe-airflow:local,
#          imagepipe-airflow-training:local (the Airflow image with TensorFlow, compose's
#          training worker); prints each image's build time and size
#   scripts/images.sh podman ARGS...   podman with the flags this machine needs
#   scripts/images.sh run|create ARGS... podman run or create with those flags (tests use it)
#   scripts/images.sh compose-up       docker/compose.yaml up with podman-compose, in order
#   scripts/images.sh compose ARGS...  podman-compose on it (ps, logs SERVICE, down -v)
# Installs Debian's podman, runc and debootstrap when missing (root or sudo). Where the official
# bases cannot be pulled (no registry reachable, as on this project's machines), it builds local
# stand-ins and passes them as build arguments; the Dockerfiles default to the official bases:
#   python:3.11.7-slim-bookworm     <- debootstrap --variant=minbase bookworm + this machine's
#                                      CPython 3.11 under /usr/local (podman import)
#   apache/airflow:3.3.2-python3.11 <- docker/standin/airflow.Dockerfile
#   apache/beam_python3.11_sdk:2.77.0 <- docker/standin/beam.Dockerfile
# pip inside a build reaches the same package index as the host: the host's pip configuration
# and the CA file it names are mounted read-only (nothing is copied into an image).
# Runtime flags: runc (crun refuses hybrid cgroups), the host network (no CNI set-up needed),
# ulimits within the machine's hard limits (podman's defaults exceed them).
# TRAINER_EXTRAS: `gpu` (tensorflow[and-cuda]) where nvidia-smi runs, else `cpu`.
set -euo pipefail
cd "$(dirname "$0")/.."

MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
STANDIN="localhost/imagepipe-standin"
RUN_FLAGS=(--network=host --ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
[[ "$(id -u)" == 0 ]] || SUDO=sudo

install_tools() {
  local missing=()
  command -v podman >/dev/null || missing+=(podman)
  command -v runc >/dev/null || missing+=(runc)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  ((${#missing[@]})) || return 0
  echo "installing Debian's ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  ${SUDO:-} apt-get update -qq >&2
  ${SUDO:-} apt-get install -y -qq --no-install-recommends "${missing[@]}" uidmap fuse-overlayfs >&2
}

pod() { ${SUDO:-} podman --runtime runc "$@"; }

# -v flags that give a build the host's pip configuration and the CA file it names.
pip_mounts() {
  local file cert
  for file in "${PIP_CONFIG_FILE:-}" /etc/pip.conf /etc/xdg/pip/pip.conf \
    "$HOME/.config/pip/pip.conf" "$HOME/.pip/pip.conf"; do
    if [[ -n "$file" && -f "$file" ]]; then
      echo "-v" "$file:/etc/pip.conf:ro"
      cert="$(sed -n 's/^ *cert *= *//p' "$file" | head -1)"
      [[ -n "$cert" && -f "$cert" ]] && echo "-v" "$cert:$cert:ro"
      return
    fi
  done
}

# Pull the official base, or say it cannot be pulled (one line, no podman error wall).
pullable() { pod image exists "$1" || pod pull -q "$1" >/dev/null 2>&1; }

# The CPython that make install's venv uses (its base prefix), as the official python image
# has it: under /usr/local, on Debian bookworm with the libraries it links to. Debian's own
# python3 (3.11.2) would not do: pinned packages need newer 3.11 releases (gcloud-aio-auth
# 5.6 needs >= 3.11.3), which is also why make install never runs on it.
host_python() {
  local python
  for python in .venv/bin/python python3.11 python3; do
    command -v "$python" >/dev/null && break
  done
  "$python" -c 'import sys; assert sys.version_info[:2] == (3, 11), "Python 3.11 needed"
print(sys.base_prefix, "%d.%d.%d" % sys.version_info[:3])'
}

python_standin() {
  local prefix version name rootfs=.images/rootfs
  read -r prefix version < <(host_python)
  if [[ "$prefix" == /usr ]]; then
    echo "the Python stand-in copies this machine's CPython from its own prefix; $prefix is the system's: install a CPython 3.11 of its own (pyenv) or build where the official base can be pulled" >&2
    exit 1
  fi
  name="$STANDIN/python:$version-bookworm"
  pod image exists "$name" && { echo "$name"; return; }
  echo "building $name: debootstrap bookworm + the host's CPython $version (~1 min)" >&2
  ${SUDO:-} rm -rf "$rootfs" && mkdir -p .images
  ${SUDO:-} debootstrap --variant=minbase \
    --include=ca-certificates,libssl3,libffi8,libsqlite3-0,libbz2-1.0,liblzma5,libreadline8,libncursesw6,libuuid1,zlib1g,libexpat1,libnsl2,libtirpc3 \
    bookworm "$rootfs" "$MIRROR" >.images/debootstrap.log 2>&1 \
    || { echo "debootstrap failed: see .images/debootstrap.log" >&2; exit 1; }
  ${SUDO:-} tar -C "$prefix" --exclude=./lib/python3.11/site-packages --exclude=./lib/python3.11/test \
    --exclude='./lib/python3.11/config-3.11-*/*.a' --exclude=./lib/python3.11/idlelib \
    --exclude=./lib/python3.11/tkinter --exclude=./bin --exclude=./share --exclude=./include \
    -c . | ${SUDO:-} tar -C "$rootfs/usr/local" -x
  ${SUDO:-} mkdir -p "$rootfs/usr/local/bin" "$rootfs/usr/local/lib/python3.11/site-packages"
  ${SUDO:-} cp "$prefix/bin/python3.11" "$rootfs/usr/local/bin/"
  ${SUDO:-} ln -sf python3.11 "$rootfs/usr/local/bin/python3"
  ${SUDO:-} ln -sf python3 "$rootfs/usr/local/bin/python"
  ${SUDO:-} chroot "$rootfs" ldconfig
  ${SUDO:-} chroot "$rootfs" /usr/local/bin/python3 -m ensurepip --default-pip >/dev/null
  ${SUDO:-} chroot "$rootfs" /usr/local/bin/python3 -c 'import ssl, sqlite3, ctypes, lzma, bz2, zlib'
  ${SUDO:-} rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  ${SUDO:-} tar -C "$rootfs" -c . | pod import \
    --change "ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin" \
    --change "ENV LANG=C.UTF-8" --change 'CMD ["python3"]' - "$name" >/dev/null
  ${SUDO:-} rm -rf "$rootfs"
  echo "$name"
}

# The base to build on: the official image when it can be pulled, else the stand-in.
base() {
  local official="$1" standin="$2"
  if pullable "$official"; then echo "$official"; return; fi
  echo "$official cannot be pulled here: using the local stand-in $standin" >&2
  if ! pod image exists "$standin"; then
    pod build "${RUN_FLAGS[@]}" --build-arg PYTHON_IMAGE="$PYTHON_IMAGE" \
      -f "docker/standin/${3}.Dockerfile" -t "$standin" docker/standin >&2
  fi
  echo "$standin"
}

python_base() {
  if pullable python:3.11.7-slim-bookworm; then
    echo python:3.11.7-slim-bookworm
  else
    echo "python:3.11.7-slim-bookworm cannot be pulled here: using a local stand-in" >&2
    python_standin
  fi
}

trainer_extras() { echo "${TRAINER_EXTRAS:-$(nvidia-smi >/dev/null 2>&1 && echo gpu || echo cpu)}"; }

# Disk a build of each image needs, in GB: its new layers in podman's store, rounded up from
# the sizes in docs/deploy.md, plus headroom for the largest layer's tar that podman writes
# under TMPDIR (/var/tmp) while committing it (all four from an empty store: 11 GB, where
# 10.4 GB were used at the peak); a rebuild after a source change redoes the install layers.
declare -A DISK_GB=([trainer]=2 [beam]=1 [airflow]=3 [airflow-training]=2)
DISK_HEADROOM_GB=3

# Say in one line, before minutes of building, that the disk cannot hold what it would write
# (podman's own error comes at the end of a long build, as "no space left on device").
check_disk() {
  local need_gb=$DISK_HEADROOM_GB target dir free_gb
  for target in "$@"; do
    need_gb=$((need_gb + ${DISK_GB[$target]:-0}))
  done
  # the GPU trainer's CUDA and cuDNN wheels
  [[ " $* " == *" trainer "* && "$(trainer_extras)" == gpu ]] && need_gb=$((need_gb + 3))
  need_gb="${IMAGES_DISK_GB:-$need_gb}"
  for dir in "$(pod info --format '{{.Store.GraphRoot}}')" "${TMPDIR:-/var/tmp}"; do
    free_gb=$(($(df --output=avail -k "$dir" | tail -1) / 1048576))
    if ((free_gb < need_gb)); then
      echo "building ${*} needs ~$need_gb GB free in $dir (podman's image store and its" \
        "temporary files); $free_gb GB are free there: free some, e.g. scripts/images.sh podman" \
        "image prune, or set IMAGES_DISK_GB to override" >&2
      exit 1
    fi
  done
}

build_one() {
  local image="$1" dockerfile="$2" start size old new
  shift 2
  start=$SECONDS
  old="$(pod image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
  # shellcheck disable=SC2046  # pip_mounts prints whole flags
  pod build "${RUN_FLAGS[@]}" $(pip_mounts) "$@" -f "docker/$dockerfile.Dockerfile" -t "$image" .
  new="$(pod image inspect --format '{{.Id}}' "$image")"
  # The image this build replaced, and its untagged layers, would stay on disk as <none>
  # (gigabytes per rebuild); kept only where a container still uses it.
  if [[ -n "$old" && "$old" != "$new" ]]; then
    pod rmi "$old" >/dev/null 2>&1 || true
  fi
  size="$(pod image inspect --format '{{.Size}}' "$image")"
  echo "built $image in $((SECONDS - start)) s, $((size / 1000000)) MB" | tee -a .images/builds.log
}

build() {
  local targets=("$@") stage
  ((${#targets[@]})) || targets=(trainer beam airflow airflow-training)
  check_disk "${targets[@]}"
  mkdir -p .images
  PYTHON_IMAGE="$(python_base)"
  for target in "${targets[@]}"; do
    case "$target" in
      trainer)
        build_one imagepipe-trainer:local trainer --build-arg PYTHON_IMAGE="$PYTHON_IMAGE" \
          --build-arg EXTRAS="$(trainer_extras)"
        ;;
      beam)
        build_one imagepipe-beam:local beam --build-arg PYTHON_IMAGE="$PYTHON_IMAGE" \
          --build-arg BEAM_IMAGE="$(base apache/beam_python3.11_sdk:2.77.0 "$STANDIN/beam:2.77.0" beam)"
        ;;
      airflow | airflow-training)
        # airflow-training: the Dockerfile's `training` stage, the airflow image's layers
        # (from the build cache when airflow was built first) plus TensorFlow's
        stage=()
        [[ "$target" == airflow-training ]] && stage=(--target training)
        build_one "imagepipe-$target:local" airflow --build-arg PYTHON_IMAGE="$PYTHON_IMAGE" \
          --build-arg AIRFLOW_IMAGE="$(base apache/airflow:3.3.2-python3.11 "$STANDIN/airflow:3.3.2" airflow)" \
          "${stage[@]}"
        ;;
      *)
        echo "unknown image $target: one of trainer beam airflow airflow-training" >&2
        exit 2
        ;;
    esac
  done
}

# docker/compose.yaml as written, under podman-compose (from PyPI, in .images/compose-venv)
# with docker/compose.podman.yaml, the images `build` made and stand-ins for PostgreSQL and
# Redis where their images cannot be pulled. COMPOSE_ENV_FILE: the secrets (default
# docker/.env, written by scripts/make-env.sh when missing).
compose() {
  local venv=.images/compose-venv
  if [[ ! -x "$venv/bin/podman-compose" ]]; then
    python3 -m venv "$venv" && "$venv/bin/pip" install --quiet podman-compose==1.6.0 >&2
  fi
  local env_file="${COMPOSE_ENV_FILE:-docker/.env}"
  [[ -f "$env_file" ]] || scripts/make-env.sh "$env_file" >&2
  PYTHON_IMAGE="$(python_base)"
  IMAGEPIPE_POSTGRES_IMAGE="$(base postgres:15-bookworm "$STANDIN/postgres:15" postgres)"
  IMAGEPIPE_REDIS_IMAGE="$(base redis:7.4.2-bookworm "$STANDIN/redis:7" redis)"
  export IMAGEPIPE_POSTGRES_IMAGE IMAGEPIPE_REDIS_IMAGE
  export IMAGEPIPE_AIRFLOW_IMAGE=localhost/imagepipe-airflow:local
  export IMAGEPIPE_AIRFLOW_TRAINING_IMAGE=localhost/imagepipe-airflow-training:local
  ${SUDO:+$SUDO --preserve-env} "$venv/bin/podman-compose" --podman-run-args="--runtime runc" \
    -p imagepipe -f docker/compose.yaml -f docker/compose.podman.yaml --env-file "$env_file" "$@"
}

# Podman 4.3 cannot wait for a health check (podman-compose skips `service_healthy` before
# podman 4.6, and health checks need systemd timers): create every container, then start
# them in the order compose.yaml's conditions say, checking each step here.
compose_up() {
  local tries
  compose up -d --no-build --no-start
  pod start imagepipe_postgres_1 imagepipe_redis_1 >/dev/null
  for tries in $(seq 60); do
    pod exec imagepipe_postgres_1 pg_isready -q -U airflow && break
    ((tries < 60)) || { echo "PostgreSQL did not start: podman logs imagepipe_postgres_1" >&2; exit 1; }
    sleep 2
  done
  pod start imagepipe_airflow-init_1 >/dev/null
  if [[ "$(pod wait imagepipe_airflow-init_1)" != 0 ]]; then
    echo "airflow db migrate failed: podman logs imagepipe_airflow-init_1" >&2
    exit 1
  fi
  pod start imagepipe_airflow-apiserver_1 imagepipe_airflow-scheduler_1 \
    imagepipe_airflow-dag-processor_1 imagepipe_airflow-triggerer_1 imagepipe_airflow-worker_1 \
    imagepipe_airflow-worker-training_1 >/dev/null
  echo "started: API server on http://127.0.0.1:8080 (scripts/images.sh compose ps)"
}

cmd="${1:-}"
shift || true
case "$cmd" in
  build) install_tools && build "$@" ;;
  podman) install_tools && pod "$@" ;;
  run | create) install_tools && pod "$cmd" "${RUN_FLAGS[@]}" "$@" ;;
  compose) install_tools && compose "$@" ;;
  compose-up) install_tools && compose_up ;;
  *)
    echo "usage: $0 build [trainer beam airflow airflow-training] | podman ARGS... | run|create ARGS... | compose-up | compose ARGS..." >&2
    exit 2
    ;;
esac

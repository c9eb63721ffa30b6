#!/usr/bin/env bash
# Real Apache Flink (and Spark) clusters on localhost for the sharding job's portable runners:
#   scripts/clusters.sh flink start DIR   JobManager + 2 TaskManagers (separate JVMs from the
#                                         engine's own scripts) + a Beam SDK worker pool; prints
#                                         the Beam options that run the job there
#   scripts/clusters.sh flink stop DIR
#   scripts/clusters.sh flink options DIR the same options again (one per line)
#   scripts/clusters.sh flink taskmanager DIR   one more TaskManager (after one was lost)
#   scripts/clusters.sh spark start|stop|options DIR   a Spark standalone master and 2 workers
#                                         (pyspark's own jars and daemon script), the same way
# Everything it fetches is cached under .clusters/ (CLUSTERS_CACHE): Flink 1.19.3 (its jars from
# PyPI's apache-flink-libraries, its bin/ scripts from the apache-flink wheel: the distribution
# itself, flink-dist, is not on Maven Central) and Beam's Flink job server, resolved by Maven.
#
# Versions (docs/deploy.md says why): Beam publishes the job server as one shaded jar
# (beam-runners-flink-<flink>-job-server); Maven Central serves none of them here, for any
# Beam version. Its parts are served: beam-runners-flink-1.19 up to 2.70.0 and
# beam-runners-java-job-service up to 2.65.0, so the newest job server that resolves is Beam
# 2.62.0's for Flink 1.19. It runs this project's Beam 2.77 Python pipelines (the portability
# API is versioned): the shards are byte-identical to the local runner's. The same for Spark:
# beam-runners-spark-3:2.62.0 (Spark is a provided dependency: the cluster's own jars from
# PyPI's pyspark 3.5.7 complete the job server's class path).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$(pwd)"
CACHE="${CLUSTERS_CACHE:-$REPO/.clusters}"
FLINK_VERSION=1.19.3
BEAM_JOB_SERVER_VERSION=2.62.0
FLINK_HOME="$CACHE/flink-$FLINK_VERSION"
JOB_SERVER_DIR="$CACHE/beam-flink-1.19-job-server-$BEAM_JOB_SERVER_VERSION"
JOB_SERVER_JAR="$JOB_SERVER_DIR/beam-runners-flink-1.19-job-server-$BEAM_JOB_SERVER_VERSION.jar"
SPARK_VERSION=3.5.7
SPARK_HOME="$CACHE/spark-$SPARK_VERSION"
SPARK_JOB_SERVER_DIR="$CACHE/beam-spark-3-job-server-$BEAM_JOB_SERVER_VERSION"
SPARK_JOB_SERVER_JAR="$SPARK_JOB_SERVER_DIR/beam-runners-spark-3-job-server-$BEAM_JOB_SERVER_VERSION.jar"
PYTHON="${PYTHON:-$REPO/.venv/bin/python}"

free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

fetch_flink() {
  [[ -f "$FLINK_HOME/.complete" ]] && return
  echo "fetching Flink $FLINK_VERSION from PyPI (apache-flink-libraries: ~230 MB, once)" >&2
  local tmp="$CACHE/download"
  rm -rf "$tmp" "$FLINK_HOME" && mkdir -p "$tmp" "$FLINK_HOME"
  "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: -d "$tmp" \
    "apache-flink-libraries==$FLINK_VERSION" >&2
  "$PYTHON" -m pip download --quiet --no-deps --only-binary :all: -d "$tmp" \
    "apache-flink==$FLINK_VERSION" >&2
  tar -xzf "$tmp"/apache-flink-libraries-*.tar.gz -C "$tmp"
  mv "$tmp"/apache-flink-libraries-*/deps/lib "$FLINK_HOME/lib"
  (cd "$tmp" && "$PYTHON" -m zipfile -e apache_flink-*.whl wheel)
  mv "$tmp/wheel/pyflink/bin" "$FLINK_HOME/bin"
  mv "$tmp/wheel/pyflink/conf" "$FLINK_HOME/conf.dist"
  cp "$tmp"/apache-flink-libraries-*/deps/bin/bash-java-utils.jar "$FLINK_HOME/bin/"
  chmod +x "$FLINK_HOME"/bin/*.sh "$FLINK_HOME/bin/flink"
  rm -rf "$tmp"
  touch "$FLINK_HOME/.complete"
}

# A Beam job server as Maven resolves it: the runner and its dependencies in lib/, and a thin
# jar whose manifest names them (and any extra jars: the engine's own), so `java -jar` (what
# Beam's FlinkRunner and SparkRunner run for --*_job_server_jar) starts the driver.
# fetch_job_server DIR JAR ARTIFACT MAIN_CLASS [EXTRA_JAR_DIR]
fetch_job_server() {
  local dir="$1" jar="$2" artifact="$3" main="$4" extra="${5:-}"
  [[ -f "$jar" ]] && return
  echo "resolving Beam's $artifact $BEAM_JOB_SERVER_VERSION with Maven (once)" >&2
  rm -rf "$dir" && mkdir -p "$dir"
  cat >"$dir/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>imagepipe</groupId><artifactId>job-server</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.beam</groupId><artifactId>$artifact</artifactId>
      <version>$BEAM_JOB_SERVER_VERSION</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-simple</artifactId>
      <version>1.7.30</version></dependency>
  </dependencies>
</project>
POM
  (cd "$dir" && mvn -q -B dependency:copy-dependencies -DoutputDirectory=lib \
    -DincludeScope=runtime >&2)
  "$PYTHON" - "$dir" "$jar" "$main" "$extra" <<'PY'
import os, pathlib, sys, zipfile
folder, jar, main, extra = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
paths = [f"lib/{p.name}" for p in sorted((folder / "lib").glob("*.jar"))]
if extra:  # the engine's jars after Beam's (one of each file name), relative to the thin jar
    names = {pathlib.Path(p).name for p in paths}
    paths += [os.path.relpath(p, folder) for p in sorted(pathlib.Path(extra).glob("*.jar"))
              if p.name not in names]
lines = ["Manifest-Version: 1.0", f"Main-Class: {main}",
         # Spark on Java 17 (what spark-class adds); harmless for Flink's client.
         "Add-Opens: java.base/java.lang java.base/java.lang.invoke java.base/java.nio "
         "java.base/sun.nio.ch java.base/java.util java.base/java.util.concurrent",
         "Class-Path: " + " ".join(paths)]
out = []
for line in lines:  # manifest lines: at most 72 bytes, continued with a space
    out.append(line[:72])
    out.extend(" " + line[i:i + 71] for i in range(72, len(line), 71))
with zipfile.ZipFile(jar, "w") as z:
    z.writestr("META-INF/MANIFEST.MF", "\r\n".join(out) + "\r\n")
PY
}

# The Python SDK workers: a pool that starts one worker process per request (EXTERNAL), with
# the `python` on PATH: this one's; one pool shared by both TaskManagers or executors
# (scripts/sdk_worker_pool.py says why not Beam's own). In its own session, holding none of the caller's files.
start_worker_pool() {
  local dir="$1" port="$2"
  PATH="$(dirname "$PYTHON"):$PATH" setsid "$PYTHON" "$REPO/scripts/sdk_worker_pool.py" "$port" \
    </dev/null >"$dir/log/sdk-worker-pool.log" 2>&1 &
  echo $! >"$dir/sdk-worker-pool.pid"
}

stop_worker_pool() {
  local dir="$1"
  if [[ -f "$dir/sdk-worker-pool.pid" ]]; then
    pkill -TERM -P "$(cat "$dir/sdk-worker-pool.pid")" 2>/dev/null || true
    kill "$(cat "$dir/sdk-worker-pool.pid")" 2>/dev/null || true
    rm -f "$dir/sdk-worker-pool.pid"
  fi
}

# The runner options (stdin) into DIR/options, what runs as a line on stderr, and the
# options on stdout (what `start` prints for the caller to pass to the sharding job).
write_options() {
  local dir="$1" message="$2"
  cat >"$dir/options"
  echo "$message" >&2
  cat "$dir/options"
}

flink_conf() {
  local dir="$1" rest_port="$2" rpc_port="$3"
  mkdir -p "$dir/conf"
  cp "$FLINK_HOME"/conf.dist/log4j*.properties "$dir/conf/"
  "$PYTHON" - "$FLINK_HOME/conf.dist/config.yaml" "$dir/conf/config.yaml" "$rest_port" "$rpc_port" <<'PY'
import sys, yaml
conf = yaml.safe_load(open(sys.argv[1]))
conf["jobmanager"]["rpc"]["port"] = int(sys.argv[4])
conf["jobmanager"]["memory"]["process"]["size"] = "1024m"
conf["taskmanager"]["memory"]["process"]["size"] = "2560m"  # sort buffers: see docs/deploy.md
conf["taskmanager"]["numberOfTaskSlots"] = 1  # 2 TaskManagers: parallelism 2 across processes
conf["parallelism"]["default"] = 2
conf["rest"]["port"] = int(sys.argv[3])
# A failed task restarts the job from scratch twice (a batch job has no checkpoints), then the
# job fails; the sharding job's output is committed only when the whole job succeeds.
conf["restart-strategy"] = {"type": "fixed-delay", "fixed-delay": {"attempts": 2, "delay": "2 s"}}
# A lost TaskManager is noticed within 20 s, and a restart that cannot get its slots gives up
# after 30 s (the defaults, 50 s and 5 min, suit clusters that replace their TaskManagers).
conf["heartbeat"] = {"interval": 4000, "timeout": 20000}
conf["slot"] = {"request": {"timeout": 30000}}
yaml.safe_dump(conf, open(sys.argv[2], "w"))
PY
}

flink_env() {
  local dir="$1"
  export FLINK_CONF_DIR="$dir/conf" FLINK_LOG_DIR="$dir/log" FLINK_PID_DIR="$dir"
}

flink_start() {
  local dir="$1"
  fetch_flink
  fetch_job_server "$JOB_SERVER_DIR" "$JOB_SERVER_JAR" beam-runners-flink-1.19 \
    org.apache.beam.runners.flink.FlinkJobServerDriver
  mkdir -p "$dir/log"
  local rest_port rpc_port pool_port
  rest_port="$(free_port)" rpc_port="$(free_port)" pool_port="$(free_port)"
  flink_conf "$dir" "$rest_port" "$rpc_port"
  flink_env "$dir"
  # The daemons keep their inherited descriptors: give them none of the caller's.
  local verb
  for verb in jobmanager taskmanager taskmanager; do
    setsid "$FLINK_HOME/bin/$verb.sh" start </dev/null >>"$dir/log/start.log" 2>&1
  done
  start_worker_pool "$dir" "$pool_port"
  local tries slots
  for tries in $(seq 90); do
    slots="$(curl -sf "http://localhost:$rest_port/overview" \
      | "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["slots-total"])' 2>/dev/null || true)"
    [[ "$slots" == 2 ]] && break
    ((tries < 90)) || { echo "Flink did not come up: see $dir/log" >&2; exit 1; }
    sleep 1
  done
  write_options "$dir" "Flink $FLINK_VERSION: JobManager http://localhost:$rest_port, 2 TaskManagers; SDK worker pool localhost:$pool_port" <<OPTIONS
--runner=FlinkRunner
--flink_master=localhost:$rest_port
--flink_version=1.19
--flink_job_server_jar=$JOB_SERVER_JAR
--environment_type=EXTERNAL
--environment_config=localhost:$pool_port
--parallelism=2
OPTIONS
}

flink_stop() {
  local dir="$1"
  [[ -f "$dir/conf/config.yaml" ]] || return 0
  flink_env "$dir"
  "$FLINK_HOME/bin/taskmanager.sh" stop-all >/dev/null 2>&1 || true
  "$FLINK_HOME/bin/jobmanager.sh" stop-all >/dev/null 2>&1 || true
  stop_worker_pool "$dir"
}

fetch_spark() {
  [[ -f "$SPARK_HOME/.complete" ]] && return
  echo "fetching Spark $SPARK_VERSION from PyPI (pyspark: ~320 MB, once)" >&2
  local tmp="$CACHE/download"
  rm -rf "$tmp" "$SPARK_HOME" && mkdir -p "$tmp"
  "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: -d "$tmp" \
    "pyspark==$SPARK_VERSION" >&2
  tar -xzf "$tmp"/pyspark-*.tar.gz -C "$tmp"
  mv "$tmp/pyspark-$SPARK_VERSION/deps" "$SPARK_HOME"
  chmod +x "$SPARK_HOME"/bin/* "$SPARK_HOME"/sbin/*.sh
  rm -rf "$tmp"
  touch "$SPARK_HOME/.complete"
}

spark_env() {
  local dir="$1"
  export SPARK_HOME SPARK_LOG_DIR="$dir/log" SPARK_PID_DIR="$dir" SPARK_CONF_DIR="$dir/conf"
}

# A standalone master and two workers of one core each, with pyspark's own daemon script (the
# start-master.sh and start-worker.sh wrappers are not in the PyPI package).
spark_start() {
  local dir="$1"
  fetch_spark
  fetch_job_server "$SPARK_JOB_SERVER_DIR" "$SPARK_JOB_SERVER_JAR" beam-runners-spark-3 \
    org.apache.beam.runners.spark.SparkJobServerDriver "$SPARK_HOME/jars"
  mkdir -p "$dir/log" "$dir/conf"
  spark_env "$dir"
  local port ui pool_port i tries alive
  port="$(free_port)" ui="$(free_port)" pool_port="$(free_port)"
  setsid "$SPARK_HOME/sbin/spark-daemon.sh" start org.apache.spark.deploy.master.Master 1 \
    --host 127.0.0.1 --port "$port" --webui-port "$ui" </dev/null >>"$dir/log/start.log" 2>&1
  for i in 1 2; do
    SPARK_WORKER_DIR="$dir/work-$i" setsid "$SPARK_HOME/sbin/spark-daemon.sh" start \
      org.apache.spark.deploy.worker.Worker "$i" --host 127.0.0.1 --webui-port "$(free_port)" \
      --cores 1 --memory 1g "spark://127.0.0.1:$port" </dev/null >>"$dir/log/start.log" 2>&1
  done
  start_worker_pool "$dir" "$pool_port"
  for tries in $(seq 90); do
    alive="$(curl -sf "http://127.0.0.1:$ui/json/" | "$PYTHON" -c \
      'import json, sys; print(sum(w["state"] == "ALIVE" for w in json.load(sys.stdin)["workers"]))' \
      2>/dev/null || true)"
    [[ "$alive" == 2 ]] && break
    ((tries < 90)) || { echo "Spark did not come up: see $dir/log" >&2; exit 1; }
    sleep 1
  done
  echo "$ui" >"$dir/webui-port"
  write_options "$dir" "Spark $SPARK_VERSION: master spark://127.0.0.1:$port (UI http://127.0.0.1:$ui), 2 workers; SDK worker pool localhost:$pool_port" <<OPTIONS
--runner=SparkRunner
--spark_master_url=spark://127.0.0.1:$port
--spark_job_server_jar=$SPARK_JOB_SERVER_JAR
--environment_type=EXTERNAL
--environment_config=localhost:$pool_port
OPTIONS
}

spark_stop() {
  local dir="$1"
  [[ -d "$dir/log" ]] || return 0
  spark_env "$dir"
  local i
  for i in 1 2; do
    "$SPARK_HOME/sbin/spark-daemon.sh" stop org.apache.spark.deploy.worker.Worker "$i" >/dev/null 2>&1 || true
  done
  "$SPARK_HOME/sbin/spark-daemon.sh" stop org.apache.spark.deploy.master.Master 1 >/dev/null 2>&1 || true
  stop_worker_pool "$dir"
}

usage() { echo "usage: $0 flink start|stop|options|taskmanager DIR | spark start|stop|options DIR" >&2; exit 2; }
engine="${1:-}" verb="${2:-}" dir="${3:-}"
[[ "$engine" =~ ^(flink|spark)$ && -n "$dir" ]] || usage
mkdir -p "$dir" && dir="$(cd "$dir" && pwd)"
case "$engine:$verb" in
  flink:start) flink_start "$dir" ;;
  flink:stop) flink_stop "$dir" ;;
  flink:taskmanager)
    flink_env "$dir"
    setsid "$FLINK_HOME/bin/taskmanager.sh" start </dev/null >>"$dir/log/start.log" 2>&1
    ;;
  spark:start) spark_start "$dir" ;;
  spark:stop) spark_stop "$dir" ;;
  *:options) cat "$dir/options" ;;
  *) usage ;;
esac

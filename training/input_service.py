"""tf.data service: the input pipeline on separate CPU workers instead of the trainer's cores.

    python -m training.input_service --workers N [--port P] [--work-dir DIR]
    python -m training.input_service --workers N --from-tf-config

Starts a dispatcher and N workers in this process and serves until stopped (the
trainers then take `--input-service HOST:P`); `--input-service local:N` makes a
trainer start its own. With `--from-tf-config` it takes its host and port from
its own task in TF_CONFIG: on Vertex AI it runs as the job's third worker pool,
which Vertex lists as the `ps` task, and the trainers find it there
(`--input-service cluster`). The trainer sends its whole training pipeline (read,
decode, augment, batch) with the DYNAMIC sharding policy: the dispatcher hands
out the trainer's shard files one at a time to whichever worker asks, so every
record is read at most once per pass; a worker that dies loses the records of
the file it was reading (TensorFlow's at-most-once guarantee), nothing is
repeated. The order is not deterministic, so a resumed run restarts its input
instead of skipping to its step. Evaluation never goes through the service.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import threading
from dataclasses import dataclass, field

import tensorflow as tf

log = logging.getLogger(__name__)


@dataclass
class LocalService:
    """A dispatcher and its workers in this process; kept referenced while in use."""

    dispatcher: tf.data.experimental.service.DispatchServer
    workers: list = field(default_factory=list)

    @property
    def address(self) -> str:
        return self.dispatcher.target.split("://", 1)[1]


def start_local(
    num_workers: int, port: int = 0, work_dir: str | None = None, worker_host: str = "localhost"
) -> LocalService:
    service = tf.data.experimental.service
    dispatcher = service.DispatchServer(
        service.DispatcherConfig(port=port, work_dir=work_dir, fault_tolerant_mode=bool(work_dir))
    )
    local = LocalService(dispatcher)
    for index in range(num_workers):
        local.workers.append(
            service.WorkerServer(
                service.WorkerConfig(
                    dispatcher_address=local.address,
                    # A fixed port after the dispatcher's: restarted, the worker is the same
                    # worker to the dispatcher and the trainers, which then carry on.
                    port=port + 1 + index if port else 0,
                    worker_address=f"{worker_host}:%port%",
                )
            )
        )
    return local


def through_service(dataset: tf.data.Dataset, address: str) -> tf.data.Dataset:
    """The dataset, computed by the service's workers (DYNAMIC: each split at most once)."""
    return dataset.apply(
        tf.data.experimental.service.distribute(
            processing_mode=tf.data.experimental.service.ShardingPolicy.DYNAMIC,
            service=f"grpc://{address}",
        )
    )


def own_address(tf_config: str) -> tuple[str, int]:
    """(host, port) of the task TF_CONFIG says this process is."""
    try:
        config = json.loads(tf_config)
        task = config["task"]
        host, _, port = config["cluster"][task["type"]][int(task["index"])].rpartition(":")
        return host, int(port)
    except (ValueError, KeyError, IndexError, TypeError) as err:
        raise ValueError(f"TF_CONFIG gives no address for this task ({err!r})") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.input_service", description=__doc__)
    parser.add_argument("--workers", type=int, default=1, help="Service workers (default 1).")
    parser.add_argument("--port", type=int, default=0, help="Dispatcher port (default: free).")
    parser.add_argument(
        "--work-dir", default=None, help="Dispatcher journal: a restarted dispatcher resumes."
    )
    parser.add_argument(
        "--worker-host",
        default="localhost",
        help="Host the trainers reach the workers at (in a pod: its IP; default localhost).",
    )
    parser.add_argument(
        "--from-tf-config",
        action="store_true",
        help="Serve at this task's own address in TF_CONFIG (a Vertex AI worker pool).",
    )
    args = parser.parse_args(argv)
    if not 1 <= args.workers <= 64:
        parser.error("--workers must be between 1 and 64")
    if args.from_tf_config:
        try:
            args.worker_host, args.port = own_address(os.environ.get("TF_CONFIG", ""))
        except ValueError as err:
            parser.error(f"--from-tf-config: {err}")
    local = start_local(args.workers, args.port, args.work_dir, args.worker_host)
    print(f"input service: dispatcher {local.address}, {args.workers} worker(s)", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    sys.exit(main())

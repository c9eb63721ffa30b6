"""Run N training workers as local processes, as a cluster scheduler would.

    python -m training.launch --num-workers 2 --data SHARDS --output RUN_DIR [train flags]

Each worker is `python -m training.train` with its own `TF_CONFIG` on a free
localhost port. Their output is streamed with a `[worker i]` prefix. When one
worker fails, the others are stopped (they would otherwise wait forever in a
collective) and the launcher exits with the failing worker's code and its last
lines of output. Rerunning the same command resumes from the last checkpoint.
Workers that exit with PREEMPTED_EXIT_CODE (all saved a checkpoint at the same step
after one got SIGTERM) are restarted, all of them, up to --max-restarts times.
With `--input-service local:N` the launcher starts the tf.data service (a
dispatcher and N workers, `python -m training.input_service`) as a process of its
own, on the cores after the trainers' with --pin-cores (one per service worker, as
many as there are), points every trainer at
it, and restarts it at the same address if it dies.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

import stageconfig
from stageconfig import ConfigError, exit_codes
from training.config import LaunchConfig, parse_input_service
from training.processes import die_with_parent
from training.train import checked_config
from training.worker_env import PREEMPTED_EXIT_CODE, WORKER_ENV

TAIL_LINES = 40
STOP_GRACE_SECONDS = 10.0
# How long the others may take to save and exit once one worker exited preempted.
PREEMPTED_GRACE_SECONDS = 120.0


class PinningError(ValueError):
    pass


def free_ports(count: int) -> list[int]:
    """Ports the OS reports free now (held open together so they are distinct)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("localhost", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def tf_config(ports: list[int], index: int) -> str:
    cluster = {"worker": [f"localhost:{port}" for port in ports]}
    return json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})


@dataclass
class Worker:
    index: int
    process: subprocess.Popen
    tail: collections.deque = field(default_factory=lambda: collections.deque(maxlen=TAIL_LINES))
    reader: threading.Thread | None = None


def _stream(worker: Worker, sink, lock: threading.Lock, quiet: threading.Event) -> None:
    for line in worker.process.stdout:
        worker.tail.append(line.rstrip("\n"))
        if quiet.is_set():
            continue
        with lock:
            sink.write(f"[worker {worker.index}] {line}")
            sink.flush()


def _stop(workers: list[Worker]) -> None:
    for worker in workers:
        if worker.process.poll() is None:
            worker.process.terminate()
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    for worker in workers:
        remaining = max(0.0, deadline - time.monotonic())
        try:
            worker.process.wait(timeout=remaining)
        except subprocess.TimeoutExpired:
            worker.process.kill()
            worker.process.wait()


def launch(
    num_workers: int,
    train_args: list[str],
    *,
    python: str = sys.executable,
    sink=sys.stdout,
    pin_cores: bool = False,
    max_restarts: int = 3,
) -> int:
    """Run the workers; with `pin_cores`, worker i runs on core i only (as `taskset -c i`).

    Pinning is for measurement: it shows what the collectives cost when each
    worker has a core of its own, rather than N workers fighting over the
    same cores. A preempted attempt (every worker saved and exited
    PREEMPTED_EXIT_CODE) is followed by a new one with all workers, which
    resume from that checkpoint.
    """
    cores = sorted(os.sched_getaffinity(0))
    if pin_cores and num_workers > len(cores):
        raise PinningError(f"--pin-cores: cannot pin {num_workers} workers to {len(cores)} cores")
    train_args, service_workers = _local_service_request(train_args)
    if not service_workers:
        return _attempts(num_workers, train_args, python, sink, cores, pin_cores, max_restarts)
    spare = cores[num_workers : num_workers + service_workers] if pin_cores else []
    with tempfile.TemporaryDirectory(prefix="imagepipe-input-journal-") as journal:
        service = SupervisedService(python, service_workers, set(spare) or None, sink, journal)
        train_args = [*train_args, "--input-service", service.address]
        try:
            return _attempts(num_workers, train_args, python, sink, cores, pin_cores, max_restarts)
        finally:
            service.stop()


def _local_service_request(train_args: list[str]) -> tuple[list[str], int]:
    """The trainers' flags without `--input-service local:N`, and N (0 when absent)."""
    rest, workers, args = [], 0, iter(train_args)
    for arg in args:
        if arg == "--input-service":
            value = next(args, "")
            flag = [arg, value]
        elif arg.startswith("--input-service="):
            value = arg.split("=", 1)[1]
            flag = [arg]
        else:
            rest.append(arg)
            continue
        if value.startswith("local:"):
            workers = parse_input_service(value)[1]
        else:
            rest += flag
    return rest, workers


class SupervisedService:
    """The tf.data service as a process of its own, restarted at the same address if it dies.

    Its dispatcher listens on a fixed port with its workers on the next ones and
    keeps a journal, so a restarted service is the same service to the trainers,
    which carry on (losing at most the unread part of the files in hand); a
    service that stayed down would stall them.
    """

    def __init__(self, python: str, workers: int, cores: set[int] | None, sink, journal: str):
        port = free_port_block(workers + 1)
        self.address = f"localhost:{port}"
        self.command = [python, "-m", "training.input_service", "--workers", str(workers),
                        "--port", str(port), "--work-dir", journal]  # fmt: skip
        self.cores, self.sink, self.restarts = cores, sink, 0
        self._stopping = threading.Event()
        self.process = self._start()
        where = f" on core(s) {','.join(map(str, sorted(cores)))}" if cores else ""
        sink.write(
            f"[launch] tf.data service pid {self.process.pid} at {self.address}, "
            f"{workers} worker(s){where}\n"
        )
        sink.flush()
        threading.Thread(target=self._watch, daemon=True).start()

    def _start(self) -> subprocess.Popen:
        cores = self.cores
        process = subprocess.Popen(
            self.command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=die_with_parent((lambda: os.sched_setaffinity(0, cores)) if cores else None),
        )
        for line in process.stdout:
            if line.startswith("input service: dispatcher "):
                break
        else:
            raise RuntimeError(f"the tf.data service did not start (exit {process.wait()})")
        threading.Thread(target=_drain, args=(process.stdout,), daemon=True).start()
        return process

    def _watch(self) -> None:
        while not self._stopping.is_set():
            code = self.process.wait()
            if self._stopping.is_set():
                return
            self.restarts += 1
            self.sink.write(
                f"[launch] tf.data service exited ({code}); restarting it at {self.address}\n"
            )
            self.sink.flush()
            try:
                self.process = self._start()
            except RuntimeError as err:
                self.sink.write(f"[launch] {err}\n")
                return

    def stop(self) -> None:
        self._stopping.set()
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


def free_port_block(count: int, attempts: int = 50) -> int:
    """A port P with P .. P+count-1 all free now (the dispatcher's, then its workers')."""
    for _ in range(attempts):
        [first] = free_ports(1)
        try:
            with contextlib.ExitStack() as held:
                for port in range(first, first + count):
                    sock = held.enter_context(socket.socket())
                    sock.bind(("localhost", port))
            return first
        except OSError:
            continue
    raise RuntimeError(f"no {count} consecutive free ports")


def _drain(stream) -> None:
    for _ in stream:
        pass


def _attempts(num_workers, train_args, python, sink, cores, pin_cores, max_restarts) -> int:
    for restart in range(max_restarts + 1):
        if restart:
            sink.write(
                f"[launch] restarting all {num_workers} workers (restart {restart} of "
                f"{max_restarts}): they saved a checkpoint and exited {PREEMPTED_EXIT_CODE}\n"
            )
            sink.flush()
        code = _attempt(num_workers, train_args, python=python, sink=sink, cores=cores,
                        pin_cores=pin_cores)  # fmt: skip
        if code != PREEMPTED_EXIT_CODE:
            return code
    print(f"[launch] preempted {max_restarts + 1} times; giving up", file=sys.stderr)
    return code


def _attempt(
    num_workers: int,
    train_args: list[str],
    *,
    python: str,
    sink,
    cores: list[int],
    pin_cores: bool,
) -> int:
    """One start of all the workers, until they all finish or one fails."""
    ports = free_ports(num_workers)
    lock, quiet = threading.Lock(), threading.Event()
    workers: list[Worker] = []
    for index in range(num_workers):
        env = {
            **WORKER_ENV,
            **os.environ,
            "TF_CONFIG": tf_config(ports, index),
            "PYTHONUNBUFFERED": "1",
        }
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        process = subprocess.Popen(
            [python, "-m", "training.train", *train_args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            # Not in the terminal's process group: Ctrl-C reaches the launcher alone, which
            # passes it on once (a worker's second Ctrl-C means "stop without saving").
            process_group=0,
            preexec_fn=die_with_parent(
                (lambda core=cores[index]: os.sched_setaffinity(0, {core})) if pin_cores else None
            ),
        )
        worker = Worker(index, process)
        worker.reader = threading.Thread(
            target=_stream, args=(worker, sink, lock, quiet), daemon=True
        )
        worker.reader.start()
        workers.append(worker)
        with lock:
            sink.write(f"[launch] worker {index} pid {process.pid} port {ports[index]}\n")
            sink.flush()

    def on_signal(signum, _frame):
        _stop(workers)
        sys.exit(128 + signum)

    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        while True:
            codes = [w.process.poll() for w in workers]
            failed = [w for w, code in zip(workers, codes, strict=True) if code not in (None, 0)]
            if failed and failed[0].process.returncode == PREEMPTED_EXIT_CODE:
                # The others agreed on the same step and are saving: let them finish.
                deadline = time.monotonic() + PREEMPTED_GRACE_SECONDS
                while time.monotonic() < deadline and any(
                    w.process.poll() is None for w in workers
                ):
                    time.sleep(0.2)
                failed = [w for w in workers if w.process.poll() != 0]
                failed.sort(key=lambda w: w.process.returncode == PREEMPTED_EXIT_CODE)
                if all(w.process.returncode == PREEMPTED_EXIT_CODE for w in failed):
                    for w in workers:
                        w.reader.join(timeout=5)
                    return PREEMPTED_EXIT_CODE
            if failed:
                first = failed[0]
                _stop(workers)
                for w in workers:
                    w.reader.join(timeout=5)
                code = first.process.returncode
                reason = f"signal {-code}" if code < 0 else f"exit code {code}"
                print(
                    f"[launch] worker {first.index} failed ({reason}); stopped the others. "
                    f"Its last output:\n" + "\n".join(f"  {line}" for line in first.tail),
                    file=sys.stderr,
                )
                return code if code > 0 else 1
            if all(code == 0 for code in codes):
                for w in workers:
                    w.reader.join(timeout=5)
                with lock:
                    sink.write(f"[launch] all {num_workers} workers finished\n")
                return 0
            time.sleep(0.2)
    except KeyboardInterrupt:
        return _interrupt(workers, quiet)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt(workers: list[Worker], quiet: threading.Event) -> int:
    """Ctrl-C: every worker is asked to save a checkpoint at a step they agree on and
    stop (their SIGINT); their own lines about it stay out of the terminal, which gets
    one line. A second Ctrl-C stops them at once."""
    quiet.set()
    previous = signal.signal(signal.SIGINT, lambda *_: [w.process.kill() for w in workers])
    try:
        for worker in workers:
            if worker.process.poll() is None:
                worker.process.send_signal(signal.SIGINT)
        deadline = time.monotonic() + PREEMPTED_GRACE_SECONDS
        for worker in workers:
            try:
                worker.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
    saved = all(w.process.returncode == exit_codes.INTERRUPTED for w in workers)
    print(
        "interrupted: "
        + ("every worker saved a checkpoint and stopped" if saved else "stopped the workers")
        + "; the same command resumes from the run's last checkpoint",
        file=sys.stderr,
    )
    return exit_codes.INTERRUPTED


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m training.launch",
        description="Start N local training workers (python -m training.train) with TF_CONFIG. "
        "All other flags are passed to training.train; see python -m training.train --help.",
        allow_abbrev=False,
    )
    stageconfig.add_arguments(parser, LaunchConfig)
    args, train_args = parser.parse_known_args(argv)
    try:
        config = stageconfig.from_args(LaunchConfig, args)
    except ConfigError as err:
        parser.error(str(err))
    if not train_args:
        parser.error("no training flags given (at least --data and --output)")
    # The workers' flags, checked once here: a mistake is one line, not one per worker.
    try:
        checked_config(_local_service_request(train_args)[0], prog=parser.prog)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return exit_codes.BAD_INPUT
    try:
        return launch(
            config.num_workers,
            train_args,
            pin_cores=config.pin_cores,
            max_restarts=config.max_restarts,
        )
    except (PinningError, ConfigError) as err:  # raised before any worker starts
        parser.error(str(err))
    except KeyboardInterrupt:  # before the workers started
        print("interrupted", file=sys.stderr)
        return exit_codes.INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())

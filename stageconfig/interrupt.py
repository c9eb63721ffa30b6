"""Ctrl-C in a command whose work runs in threads and worker processes: one line.

The terminal sends SIGINT to the whole process group: a runner's worker processes die
with the main process, and they and the threads that talked to them each report it
with a traceback while the main one unwinds (Beam's local runner: some 80 lines).
None of that is news to the user who pressed Ctrl-C. So while the command works, its
stderr, and that of every process it starts, goes through a pipe that this process
relays to the terminal; from the interrupt on, the relay drops it, and the command
says what became of its work in one line (`say`).
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading


class QuietInterrupt:
    """`with QuietInterrupt() as interrupt:` ... `except KeyboardInterrupt:
    interrupt.say(...)`. A second Ctrl-C while the command cleans up is ignored. Outside
    the main thread (no signal handlers there) it changes nothing."""

    def __enter__(self) -> QuietInterrupt:
        self.interrupted = threading.Event()
        self._quiet = threading.Event()  # set with the signal, before `interrupted`
        self._previous = None
        self._terminal = 2
        if threading.current_thread() is not threading.main_thread():
            return self
        sys.stderr.flush()
        self._terminal = os.dup(2)
        read_end, write_end = os.pipe()
        os.dup2(write_end, 2)  # inherited by the worker processes started from now on
        os.close(write_end)
        # Python runs a signal handler in the main thread between two bytecodes, which can
        # be long after the signal while the main thread waits in C; meanwhile a dying
        # worker's traceback reached the terminal. The wakeup fd is written the moment the
        # signal arrives: the relay stops on that.
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_write, False)
        self._wake = (wake_read, wake_write)
        self._previous_wakeup = signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
        self._relay = threading.Thread(
            target=self._forward, args=(read_end, wake_read), daemon=True
        )
        self._relay.start()
        self._previous = signal.signal(signal.SIGINT, self._on_interrupt)
        return self

    def _forward(self, read_end: int, wake_read: int) -> None:
        try:
            while True:
                ready, _, _ = select.select([wake_read, read_end], [], [])
                if wake_read in ready and signal.SIGINT in os.read(wake_read, 512):
                    self._quiet.set()
                if read_end in ready:
                    chunk = os.read(read_end, 65536)
                    if not chunk:
                        return
                    if not self._quiet.is_set():
                        os.write(self._terminal, chunk)
        finally:
            os.close(read_end)

    def _on_interrupt(self, _signum, _frame) -> None:
        if self.interrupted.is_set():
            return
        self._quiet.set()
        self.interrupted.set()
        raise KeyboardInterrupt

    def say(self, line: str) -> None:
        os.write(self._terminal, f"{line}\n".encode())

    def __exit__(self, *_exc) -> None:
        if self._previous is None:
            return
        signal.signal(signal.SIGINT, self._previous)
        signal.set_wakeup_fd(self._previous_wakeup)
        if self.interrupted.is_set():
            return  # stderr stays the dropping relay: threads and workers may still be dying
        sys.stderr.flush()
        os.dup2(self._terminal, 2)  # closes this process's end of the pipe: the relay ends
        self._relay.join(timeout=2)  # when no worker process holds it either
        if not self._relay.is_alive():
            for fd in (self._terminal, *self._wake):
                os.close(fd)

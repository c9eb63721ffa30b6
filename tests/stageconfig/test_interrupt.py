"""QuietInterrupt: from the Ctrl-C on, nothing a dying worker prints reaches the terminal,
even while the main thread is inside a long C call (where Python runs no signal handler:
Beam's runner waits in gRPC while its worker processes die and their tracebacks arrive)."""

import sys

import pytest

from stageconfig import exit_codes
from tests.interrupt import interrupt_when

pytestmark = pytest.mark.slow  # processes

WORKER = """
import signal, sys, time
def dying(*_):
    time.sleep(0.2)  # a runner thread noticing its dead worker
    sys.stderr.write("Traceback (most recent call last): a worker saw the signal\\n")
    sys.stderr.flush()
    sys.exit(1)
signal.signal(signal.SIGINT, dying)
print("ready", flush=True)
time.sleep(60)
"""

COMMAND = f"""
import hashlib, subprocess, sys, time
from stageconfig.interrupt import QuietInterrupt
with QuietInterrupt() as interrupt:
    worker = subprocess.Popen([sys.executable, "-c", {WORKER!r}], stdout=subprocess.PIPE)
    worker.stdout.readline()
    try:
        print("working", flush=True)
        hashlib.pbkdf2_hmac("sha256", b"x", b"y", 5_000_000)  # seconds in one C call
        print("the C call ended before the signal came", flush=True)
    except KeyboardInterrupt:
        worker.wait()
        time.sleep(0.2)
        interrupt.say("interrupted")
        sys.exit({exit_codes.INTERRUPTED})
"""


def test_a_workers_dying_words_are_dropped_while_the_main_thread_is_in_c():
    code, printed = interrupt_when([sys.executable, "-c", COMMAND], said="working", after=0.2)
    assert "the C call ended" not in printed, printed  # the signal came too late to test
    assert code == exit_codes.INTERRUPTED, printed
    assert "Traceback" not in printed, printed
    assert printed.strip().splitlines()[-1] == "interrupted", printed

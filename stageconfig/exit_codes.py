"""What a stage's exit code means, for every launcher and the DAG to honour alike.

A code says what to do next: fix something (never retried), restart (not a
failure), or retry (the run itself broke). Standard library only: DAG files and
operators import it at parse time.
"""

from __future__ import annotations

OK = 0
# The sharding job ran, but rejected more inputs than --max-error-fraction allows, or
# stored none: the data needs a look; rerunning the same data gives the same answer.
TOO_MANY_REJECTED = 1
# Bad flags, parameters or input (a missing folder, unusable shards): one line says what
# to fix; a retry cannot help.
BAD_INPUT = 2
# The job itself failed (the output file system, the runner, a bug), not one input: the
# terminal gets one line naming the stage and the log holding the traceback; a retry may
# help.
JOB_FAILED = 3
# The data checks (datacheck, with data_checks=fail) found anomalies against the data the
# serving model was trained on: a person decides; the same data gives the same answer.
DATA_ANOMALIES = 4
# Training only: every worker saved a checkpoint at the same step and stopped (EX_TEMPFAIL,
# "try again later"); the same command resumes it.
PREEMPTED = 75
# Ctrl-C (SIGINT), as shells report it (128 + 2): the stage stopped on the user's word,
# said so in one line and left nothing half-written; the same command starts again.
INTERRUPTED = 130

# Codes that a retry cannot change: the task fails at once.
FINAL = frozenset({TOO_MANY_REJECTED, BAD_INPUT, DATA_ANOMALIES})


def is_final(code: int) -> bool:
    """A failure that a retry of the same command would repeat."""
    return code in FINAL

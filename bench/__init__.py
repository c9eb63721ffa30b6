"""Benchmarks: each stage against its ceiling and against what a user would do instead.

Run by `make bench` (`python -m bench`), never by `make test`; a smoke test runs
each benchmark at a tiny size so they cannot rot.
"""

import sys

if sys.argv[:1] == ["-m"]:  # `python -m bench...` is starting: as training's CLIs do
    from training import quiet_tf

    quiet_tf.setup_cli()

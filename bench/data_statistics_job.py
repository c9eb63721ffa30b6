"""`python -m bench.data_statistics_job with|without ARGS...`: the sharding job's CLI, as
is (`with`) or with its data statistics and perceptual hashing taken out (`without`: what
the job did before issue #27), for bench/data_statistics.py to time side by side.

The switch lives here and in bench/without_statistics, not in the job: `without` replaces
the pHash with a constant and the per-image statistics with nothing (sitecustomize.py
there, in every process, worker processes included) and the near-copy search with an
empty transform (here, where the pipeline is built).
"""

from __future__ import annotations

import sys

import apache_beam as beam


class _NoNearCopies(beam.PTransform):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def expand(self, hashes):
        return hashes | "Nothing" >> beam.Filter(lambda _: False)


def main(argv: list[str]) -> int:
    variant, job_args = argv[0], argv[1:]
    from beam_jobs import pipeline, shard_images

    if variant == "without":
        if not getattr(sys.modules.get("sitecustomize"), "WITHOUT_STATISTICS", False):
            raise SystemExit("without: bench/without_statistics must be on PYTHONPATH")
        pipeline.FindNearCopies = _NoNearCopies
    elif variant != "with":
        raise SystemExit(f"variant must be with or without, not {variant!r}")
    shard_images.configure_logging()
    return shard_images.run(job_args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

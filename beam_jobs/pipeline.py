"""The sharding job's Beam side: its options, its two pipelines, and running them.

Imported by the driver (beam_jobs/shard_images.py) only once a run needs Beam: a run
that finds its output in the shard cache plans, looks up and reuses without it.
"""

from __future__ import annotations

import argparse
import logging

import apache_beam as beam
from apache_beam.options.pipeline_options import (
    DirectOptions,
    FlinkRunnerOptions,
    PipelineOptions,
    StandardOptions,
    WorkerOptions,
)

from beam_jobs import output as out
from beam_jobs.config import ConfigError, ShardConfig
from beam_jobs.copies import FindCopies, FindNearCopies, StageHashLists
from beam_jobs.local_runner import LOCAL_RUNNER, LOCAL_RUNNER_NAMES, LocalMode, given
from beam_jobs.plan import StagedPlan
from beam_jobs.transforms import (
    ERRORS,
    FRAGMENTS,
    HASHES,
    STATS,
    HashImageFn,
    MergeStatisticsFn,
    ReadImages,
    ReadPlanUnits,
    WriteJsonLines,
    WriteShards,
)

log = logging.getLogger("beam_jobs.shard_images")


def _beam_flag_parser() -> argparse.ArgumentParser:
    """Every flag Beam's PipelineOptions (all runners) understands."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pending = list(PipelineOptions.__subclasses__())
    seen = set()
    while pending:
        cls = pending.pop()
        if cls in seen:
            continue
        seen.add(cls)
        pending.extend(cls.__subclasses__())
        try:
            cls._add_argparse_args(parser)
        except argparse.ArgumentError:
            continue  # the same flag declared by two option classes
    return parser


def pipeline_options(beam_args: list[str]) -> PipelineOptions:
    """Validate pass-through flags (a typo is an error, not a silent no-op); a local
    run gets Beam's FnApiRunner by name (see beam_jobs/local_runner.py)."""
    _, unknown = _beam_flag_parser().parse_known_args(beam_args)
    unknown = [arg for arg in unknown if arg.startswith("-")]
    if unknown:
        raise ConfigError(f"unknown flag(s): {' '.join(unknown)} (see --help)")
    options = PipelineOptions(list(beam_args))
    standard = options.view_as(StandardOptions)
    if standard.runner in LOCAL_RUNNER_NAMES:
        standard.runner = LOCAL_RUNNER
        direct = options.view_as(DirectOptions)
        if (direct.direct_num_workers or 1) > 1 and not given(beam_args, "--direct_running_mode"):
            direct.direct_running_mode = "multi_processing"  # workers asked for: processes
    return options


def is_local(options: PipelineOptions) -> bool:
    return options.view_as(StandardOptions).runner == LOCAL_RUNNER


def describe_runner(options: PipelineOptions) -> str:
    runner = options.view_as(StandardOptions).runner
    if runner != LOCAL_RUNNER:
        return runner
    direct = options.view_as(DirectOptions)
    return f"{runner} ({direct.direct_running_mode}, {direct.direct_num_workers or 1} worker(s))"


# Workers a distributed run is planned for when its options name no count (Dataflow's
# autoscaling, a Spark master): more units than workers cost only a few bytes written twice.
DEFAULT_REMOTE_PARALLELISM = 8


def expected_parallelism(options: PipelineOptions) -> int:
    """The workers a run's units of work are sized for (beam_jobs.plan.whole_shard_images):
    the local runner's, else what the options say."""
    if is_local(options):
        return options.view_as(DirectOptions).direct_num_workers or 1
    workers = options.view_as(WorkerOptions)
    flink = options.view_as(FlinkRunnerOptions).parallelism
    return max(
        1,
        workers.max_num_workers
        or workers.num_workers
        or (flink if flink and flink > 0 else DEFAULT_REMOTE_PARALLELISM),
    )


def use_local_mode(options: PipelineOptions, mode: LocalMode) -> None:
    """Run on the local runner in `mode` (what `beam_jobs.local_runner` picked)."""
    direct = options.view_as(DirectOptions)
    direct.direct_running_mode, direct.direct_num_workers = mode.running_mode, mode.workers


def build_pipeline(
    p: beam.Pipeline,
    config: ShardConfig,
    staged: StagedPlan,
    staging: str,
    shard_counts: dict[str, int],
) -> None:
    units = p | "ReadPlan" >> ReadPlanUnits(staged)
    results = units | "ReadImages" >> ReadImages(
        staging, config.max_side, config.max_pixels, int(config.max_file_mb * 2**20)
    )
    reports = results[FRAGMENTS] | "WriteShards" >> WriteShards(
        staging, shard_counts, config.compression
    )
    reports | "WriteShardReports" >> WriteJsonLines(
        out.join(staging, "_reports", "shards"), key_field="file"
    )
    results[ERRORS] | "WriteDeadLetters" >> WriteJsonLines(
        out.join(staging, out.ERRORS_DIR, "errors"), key_field="key", num_files=4
    )
    (
        results[HASHES]
        | "FindCopies" >> FindCopies()
        | "WriteCopies"
        >> WriteJsonLines(out.join(staging, out.COPIES_DIR, "copies"), key_field="sha256")
    )
    (
        results[HASHES]
        | "FindNearCopies" >> FindNearCopies(config.near_duplicate_distance)
        | "WriteNearCopies"
        >> WriteJsonLines(out.join(staging, out.COPIES_DIR, "near"), key_field="key")
    )
    (
        results[STATS]
        | "MergeStatistics" >> beam.CombineGlobally(MergeStatisticsFn())
        | "WriteStatistics"
        >> WriteJsonLines(out.join(staging, "_reports", "statistics"), key_field="num_images")
    )


def build_grouping_pipeline(
    p: beam.Pipeline,
    config: ShardConfig,
    staged: StagedPlan,
    staging: str,
    groups: str,
):
    """--leak-free-splits' first pass: every planned image's pHash -> groups of copies."""
    (
        p
        | "ReadPlan" >> ReadPlanUnits(staged)
        | "Items" >> beam.FlatMap(lambda unit: unit[1])
        | "HashImages"
        >> beam.ParDo(
            HashImageFn(config.max_side, config.max_pixels, int(config.max_file_mb * 2**20))
        )
        | "Batch" >> beam.BatchElements(min_batch_size=64, max_batch_size=4096)
        | "StageHashLists" >> StageHashLists(staging)
        | "FindGroups" >> FindNearCopies(config.near_duplicate_distance, keep_exact=True)
        | "WriteGroups" >> WriteJsonLines(groups, key_field="key")
    )


def run_sharding(
    options: PipelineOptions,
    config: ShardConfig,
    staged: StagedPlan,
    staging: str,
    shard_counts: dict[str, int],
) -> None:
    log.info("running the sharding pipeline on %s (staging %s)", describe_runner(options), staging)
    with beam.Pipeline(options=options) as pipeline:
        build_pipeline(pipeline, config, staged, staging, shard_counts)


def run_grouping(
    options: PipelineOptions, config: ShardConfig, staged: StagedPlan, staging: str, groups: str
) -> None:
    log.info("grouping near-copies for --leak-free-splits on %s", describe_runner(options))
    with beam.Pipeline(options=options) as pipeline:
        build_grouping_pipeline(pipeline, config, staged, staging, groups)

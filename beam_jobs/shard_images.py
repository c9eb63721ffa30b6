"""Shard a folder (or manifest) of raw images into validated TFRecord shards.

    python -m beam_jobs.shard_images --input IMAGES --output SHARDS [Beam options]

Runs on Beam's local runner (one thread, a thread per core or a worker process
per core, by input size and cores: beam_jobs/local_runner.py) unless a `--runner` is given;
`--runner DataflowRunner --project ... --region ... --temp_location gs://...`
(or Flink/Spark with their usual options) runs the same pipeline elsewhere.
Exit codes (stageconfig/exit_codes.py): 0 done; 1 too many inputs rejected, or none
stored; 2 bad flags or input (one line); 3 the job itself failed (one line naming the
stage and the log file holding the traceback).
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from beam_jobs import cache, fs
from beam_jobs import output as out
from beam_jobs.config import ConfigError, ShardConfig, add_arguments, config_from_args
from beam_jobs.fs import json_bytes
from beam_jobs.local_runner import (
    LOCAL_RUNNER_NAMES,
    LocalMode,
    available_cores,
    choose_local_mode,
    given,
    limit_malloc_arenas,
    return_large_blocks,
)
from beam_jobs.perceptual_hash import MAX_GROUP_SIZE
from beam_jobs.plan import InputError, Plan, PlanOutline, StagedPlan, build_plan, write_plan
from beam_jobs.splits import group_splits
from shardspec.layout import CONFIG
from stageconfig import exit_codes
from stageconfig.interrupt import QuietInterrupt

if TYPE_CHECKING:
    from apache_beam.options.pipeline_options import PipelineOptions

log = logging.getLogger("beam_jobs.shard_images")

EXIT_CODES_HELP = (
    "Exit codes: 0 done; 1 more inputs rejected than --max-error-fraction allows, or none "
    "stored (errors/ lists each); 2 bad flags or input; 3 the job itself failed (the "
    "output file system, the runner): one line names the stage and the log file."
)


class ErrorBudgetExceeded(RuntimeError):
    """More inputs were rejected than --max-error-fraction allows, or none was stored."""


class JobFailed(RuntimeError):
    """The job failed for a reason that concerns no single input (exit 3, retryable)."""

    def __init__(self, stage: str, cause: BaseException):
        first_line = (str(cause).splitlines() or [""])[0][:500]
        super().__init__(f"{stage}: {type(cause).__name__}: {first_line}")
        self.stage = stage


@contextmanager
def _stage(name: str) -> Iterator[None]:
    """Name the stage an unexpected exception came from; the user's errors pass through."""
    try:
        yield
    except (InputError, ErrorBudgetExceeded, JobFailed):
        raise
    except Exception as err:
        raise JobFailed(name, err) from err


@dataclass(frozen=True)
class ShardResult:
    output: str
    metadata: dict
    seconds: float
    reused_from: str = ""

    def summary(self) -> str:
        m = self.metadata
        if self.reused_from:
            return (
                f"inputs and parameters unchanged (fingerprint {m['fingerprint'][:12]}): reused "
                f"the {m['num_records']} records in {self.reused_from}, nothing resharded; "
                f"{self.seconds:.1f}s -> {self.output} (--force-reshard to shard again)"
            )
        splits = ", ".join(
            f"{name} {s['num_records']} in {s['num_shards']} shards"
            for name, s in m["splits"].items()
            if s["num_shards"]
        )
        return (
            f"sharded {m['num_records']}/{m['num_inputs']} images ({splits}); "
            f"{m['num_errors']} rejected ({m['error_fraction']:.1%}); "
            f"{m['num_classes']} classes; {self.seconds:.1f}s -> {self.output}"
        )


def copies_warning(summary: dict, where: str) -> str:
    """A warning for copies that skew training or its scores; "" when there are none."""
    problems = []
    if summary["groups_across_labels"]:
        problems.append(f"{summary['groups_across_labels']} under two or more labels")
    if summary["groups_across_splits"]:
        problems.append(
            f"{summary['groups_across_splits']} in two or more splits (a model is scored "
            "on images it trained on)"
        )
    if not problems:
        return ""
    return (
        f"{summary['groups']} images are stored more than once ({summary['extra_copies']} "
        f"extra copies of the same bytes): {'; '.join(problems)}. Each is listed in {where}"
    )


def near_copies_warning(metadata: dict, where: str) -> str:
    """A warning for validation and test images with a near-copy in train ("" for none):
    a resized or re-encoded copy of a test image that the model trained on inflates its
    score as surely as the same bytes do."""
    duplicates = metadata["statistics"]["duplicates"]
    if not duplicates["held_out_with_near_copy_in_train"]:
        return ""
    return (
        f"{duplicates['held_out_with_near_copy_in_train']} validation/test images have a "
        f"near-copy in train (resized, re-encoded or slightly edited: pHash within "
        f"{metadata['params']['near_duplicate_distance']} bits), in "
        f"{duplicates['near_groups_across_splits']} groups listed in {where} (kind near); "
        "--leak-free-splits keeps each group in one split"
    )


def alike_warning(metadata: dict, where: str) -> str:
    """A warning for images too alike for the hash to tell copies from look-alikes."""
    duplicates = metadata["statistics"]["duplicates"]
    if not duplicates["alike_groups"]:
        return ""
    distance = metadata["params"]["near_duplicate_distance"]
    return (
        f"{duplicates['alike_images']} images fall into {duplicates['alike_groups']} groups "
        f"of more than {MAX_GROUP_SIZE} look-alikes (pHash within {distance} bits): too "
        "alike for a perceptual hash to tell copies apart (flat or synthetic images), so "
        f"they are not listed, counted as leaks or kept in one split (kind alike in {where}); "
        "a lower --near-duplicate-distance separates them"
    )


def untrained_labels_warning(metadata: dict) -> str:
    """A warning for labels with no train image ("" when every label has one): the model
    gets an output for them that it never learns (a class of one or two images, or all
    of its images rejected or assigned to other splits), and their test images count as
    errors however good the model is."""
    splits = metadata["splits"]
    missing = [
        label for label in metadata["label_map"] if not splits["train"]["per_label"].get(label)
    ]
    if not missing:
        return ""
    described = []
    for label in missing[:5]:
        elsewhere = [
            f"{split} {splits[split]['per_label'][label]}"
            for split in splits
            if splits[split]["per_label"].get(label)
        ]
        described.append(f"{label!r} ({', '.join(elsewhere) or 'no image stored'})")
    more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
    return (
        f"{len(missing)} of {len(metadata['label_map'])} labels have no train image, so the "
        f"model cannot learn them: {'; '.join(described)}{more}. Give each class more images "
        "(each image's split is drawn by --splits) or assign splits in a manifest"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m beam_jobs.shard_images",
        allow_abbrev=False,  # an abbreviation would hide a typo in a Beam flag
        description="Shard raw images into TFRecords. Flags not listed here are passed to "
        "Beam as pipeline options (--runner, --direct_num_workers, --project, --region, "
        "--temp_location, ...). Without --runner (or with DirectRunner) Beam's local "
        "FnApiRunner runs it in the mode measured fastest for the input's size and the "
        "machine's cores (one thread, a thread per core, or a worker process per core); "
        "--direct_running_mode/--direct_num_workers override that.",
        epilog=EXIT_CODES_HELP,
    )
    add_arguments(parser)
    return parser


class BeamFlags:
    """The flags passed through to Beam, read by Beam only when the run needs it.

    Beam's import is most of what a run that reuses a cached output costs (1.1 of 1.7 s):
    a run whose flags only name the local runner (and the labels Airflow's Beam operator
    adds for Dataflow) is planned without them, and parses them when it runs the job."""

    def __init__(self, args: list[str]):
        self.args = list(args)

    @cached_property
    def local_only(self) -> bool:
        parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
        parser.add_argument("--runner")
        parser.add_argument("--labels", action="append")
        try:
            known, rest = parser.parse_known_args(self.args)
        except argparse.ArgumentError:
            return False
        return not rest and known.runner in LOCAL_RUNNER_NAMES

    @cached_property
    def options(self) -> PipelineOptions:
        """Beam's options (a ConfigError for a flag Beam does not know), given to Beam's
        file systems too: listing, staging and publishing in this process use the same
        options (credentials, project) as the workers."""
        from beam_jobs.pipeline import pipeline_options

        options = pipeline_options(self.args)
        fs.filesystems().set_options(options)
        return options

    @property
    def local(self) -> bool:
        """The job runs on this machine, on Beam's local runner."""
        if self.local_only:
            return True
        from beam_jobs.pipeline import is_local

        return is_local(self.options)

    @property
    def choose_local(self) -> bool:
        """Whether the local runner's mode is chosen by the input (not set by a flag)."""
        return not given(self.args, "--direct_running_mode", "--direct_num_workers")


def shard_images(config: ShardConfig, flags: BeamFlags) -> ShardResult:
    """Plan, run the pipeline, replace the output. Raises InputError, ErrorBudgetExceeded
    or JobFailed.

    On the local runner with no mode set by a flag (`flags.choose_local`) the job runs on
    one thread, a thread per core or a worker process per core by the planned number of
    images (what `beam_jobs.local_runner` measured fastest).
    """
    started = time.monotonic()
    with _stage("checking the output folder"):
        out.check_output_is_ours(config.output)
    with _stage("planning"):
        planning = time.monotonic()
        plan = build_plan(config, _planned_workers(flags))
        planned = time.monotonic() - planning
    with _stage("looking up the shard cache"):
        key = cache.fingerprint(config, plan) if config.cache_dir else ""
        found = cache.lookup(config.cache_dir, key) if key and not config.force_reshard else None
    if found:
        with _stage("reusing cached shards"):
            return _reuse(config, found, started)
    with _stage("planning"):
        replacing = time.monotonic()
        mode = _local_mode(flags, plan)
        workers = mode.workers if mode else _planned_workers(flags)
        if workers != plan.parallelism:  # one thread picked: every shard one unit
            plan = plan.for_parallelism(config, workers)
        log.info(
            "planning took %.2f s (listing, labels, splits, shards)",
            planned + time.monotonic() - replacing,
        )
    with _stage("staging"):
        staging, staged = _stage_plan(config, plan)
    try:
        if config.leak_free_splits:
            with _stage("grouping copies (--leak-free-splits)"):
                options = _options(flags, mode)
                plan, staged = _leak_free_plan(config, options, plan, staging, staged)
        # From here the items are read from the staged plan alone; the driver keeps an
        # outline through the run. Beam is imported after they are gone (on a cache miss
        # over local paths it was not imported yet): at 200,000 images the items are
        # 150 MB of the driver's memory, and Beam's import another 60.
        outline = plan.outline()
        del plan
        options = _options(flags, mode)
        with _stage("running the pipeline"):
            _run_pipeline(config, options, outline, staging, staged)
        with _stage("writing the output"):
            metadata, problem = _finish_output(config, outline, staging, key, _runner(options))
    except (JobFailed, KeyboardInterrupt):
        _remove_staging(staging)
        raise
    if problem:
        raise ErrorBudgetExceeded(problem)
    return ShardResult(config.output, metadata, time.monotonic() - started)


def _local_mode(flags: BeamFlags, plan: Plan) -> LocalMode | None:
    """The local runner's mode for this plan, where the job picks it (no flag sets it)."""
    if flags.local and flags.choose_local:
        return choose_local_mode(plan.num_inputs, mean_bytes=plan.mean_bytes)
    return None


def _options(flags: BeamFlags, mode: LocalMode | None) -> PipelineOptions:
    from beam_jobs.pipeline import use_local_mode

    options = flags.options
    if mode:
        use_local_mode(options, mode)
    return options


def _runner(options: PipelineOptions) -> str:
    from beam_jobs.pipeline import describe_runner

    return describe_runner(options)


def _planned_workers(flags: BeamFlags) -> int:
    """The workers the plan's units are first sized for: the cores, where the local runner's
    mode is still to be chosen (it usually takes them all), else what the options say."""
    if flags.local and flags.choose_local:
        return available_cores()
    from beam_jobs.pipeline import expected_parallelism

    return expected_parallelism(flags.options)


def _reuse(config: ShardConfig, found: tuple[str, dict], started: float) -> ShardResult:
    source, metadata = found
    # The error budget is not part of the fingerprint (it does not change the
    # records): a reused output must still be within this run's budget.
    if metadata["error_fraction"] > config.max_error_fraction:
        raise ErrorBudgetExceeded(
            f"the unchanged inputs were sharded before with {metadata['num_errors']} "
            f"of {metadata['num_inputs']} rejected ({metadata['error_fraction']:.1%} > "
            f"--max-error-fraction {config.max_error_fraction:.1%}); by reason: "
            f"{metadata['errors_by_reason']}. See {out.join(source, out.ERRORS_DIR)}."
        )
    if source.rstrip("/") != config.output.rstrip("/"):
        out.replace_output(
            config.output,
            out.new_staging_dir(config.output),  # nothing staged: only the pointer
            {**metadata, "location": source},
            success=True,
        )
    result = ShardResult(config.output, metadata, time.monotonic() - started, source)
    log.info("%s", result.summary())
    return result


def _stage_plan(config: ShardConfig, plan: Plan) -> tuple[str, StagedPlan]:
    """Untrust the output, record the parameters, write the plan; -> the staging folder
    and the plan there."""
    out.invalidate(config.output)
    # The effective parameters beside the output from the start (metadata.json repeats them
    # at the end): a running or killed job says what it was asked to do.
    out.write_bytes(out.join(config.output, CONFIG), json_bytes(config.to_json(), indent=2))
    staging = out.new_staging_dir(config.output)
    return staging, _write_plan(staging, plan)


def _write_plan(staging: str, plan: Plan) -> StagedPlan:
    return write_plan(out.join(staging, "_plan", "inputs.jsonl"), plan.items)


def _run_pipeline(
    config: ShardConfig,
    options: PipelineOptions,
    plan: PlanOutline,
    staging: str,
    staged: StagedPlan,
) -> None:
    from beam_jobs.pipeline import run_sharding

    run_sharding(options, config, staged, staging, plan.shard_counts)


def _leak_free_plan(
    config: ShardConfig,
    options: PipelineOptions,
    plan: Plan,
    staging: str,
    staged: StagedPlan,
) -> tuple[Plan, StagedPlan]:
    """Hash every image, group copies, and place each group in one split: the plan again
    with those splits, also as staged (over the first)."""
    from beam_jobs.pipeline import run_grouping

    groups_dir = out.join(staging, "_groups")
    run_grouping(options, config, staged, staging, out.join(groups_dir, "g"))
    split_of = {item.key: item.split for item in plan.items if not item.reject}
    overrides = {}
    groups = [g for g in out.read_json_lines(groups_dir, "*") if g["images"]]
    for group in groups:
        for key, split in group_splits(group).items():
            if split_of.get(key) != split:
                overrides[key] = split
    placed = plan.with_splits(config, overrides)
    moved = sum(
        1 for item in placed.items if not item.reject and split_of.get(item.key) != item.split
    )
    log.info(
        "--leak-free-splits: %d groups of copies, each kept in one split (%d images moved "
        "to their group's split; a manifest's split column is kept)",
        len(groups),
        moved,
    )
    return placed, _write_plan(staging, placed)


def _finish_output(
    config: ShardConfig, plan: PlanOutline, staging: str, key: str, runner: str
) -> tuple[dict, str]:
    """The staged run -> metadata.json, and the shards with `_SUCCESS` when within budget;
    -> (metadata, why it is not within budget or "")."""
    reports = out.read_json_lines(out.join(staging, "_reports"), "shards*")
    reports = out.complete_shards(staging, plan, reports, config)
    errors = out.read_json_lines(out.join(staging, out.ERRORS_DIR), "*")
    copies = out.read_json_lines(out.join(staging, out.COPIES_DIR), "*")
    statistics = out.read_json_lines(out.join(staging, "_reports"), "statistics*")
    metadata = out.build_metadata(config, plan, reports, errors, runner, copies, statistics)
    if warning := copies_warning(metadata["copies"], out.join(config.output, out.COPIES_DIR)):
        log.warning("%s", warning)
    if warning := near_copies_warning(metadata, out.join(config.output, out.COPIES_DIR)):
        log.warning("%s", warning)
    if warning := alike_warning(metadata, out.join(config.output, out.COPIES_DIR)):
        log.warning("%s", warning)
    if warning := untrained_labels_warning(metadata):
        log.warning("%s", warning)
    from beam_jobs.images import INTERNAL_ERROR  # (numpy, Pillow: imported by the job)

    if internal := metadata["errors_by_reason"].get(INTERNAL_ERROR):
        log.warning(
            "%d inputs failed with an unexpected error (internal_error) and were dead-lettered; "
            "each is listed with the step and the exception in %s",
            internal,
            out.join(config.output, out.ERRORS_DIR),
        )
    problem = _budget_problem(config, metadata)
    within_budget = not problem
    metadata["status"] = "ok" if within_budget else "failed: too many rejected images"
    if key:
        metadata["fingerprint"] = key
    out.replace_output(config.output, staging, metadata, success=within_budget)
    if key and within_budget:
        cache.record(config.cache_dir, key, config.output)
    return metadata, problem


def _budget_problem(config: ShardConfig, metadata: dict) -> str:
    """Why this output must not be trained on ("" when it may): too many inputs rejected,
    or none stored, whatever the budget allows."""
    by_reason = ", ".join(
        f"{reason} {count}"
        for reason, count in sorted(metadata["errors_by_reason"].items(), key=lambda rc: -rc[1])
    )
    where = out.join(config.output, out.ERRORS_DIR)
    if metadata["num_records"] == 0:
        return (
            f"no image was stored: all {metadata['num_inputs']} inputs were rejected (by "
            f"reason: {by_reason}). See {where} for each file; no _SUCCESS written."
        )
    if metadata["error_fraction"] > config.max_error_fraction:
        return (
            f"{metadata['num_errors']} of {metadata['num_inputs']} inputs were rejected "
            f"({metadata['error_fraction']:.1%} > --max-error-fraction "
            f"{config.max_error_fraction:.1%}); by reason: {by_reason}. "
            f"See {where} for each file; no _SUCCESS written."
        )
    return ""


def _remove_staging(staging: str) -> None:
    """Best effort: the next run removes what is left of it anyway."""
    try:
        out.delete_tree(staging)
    except Exception as err:
        log.warning("could not remove %s (the next run will): %s", staging, err)


def run(argv: list[str] | None = None) -> int:
    """The CLI: flags -> a sharded output; returns the exit code (see EXIT_CODES_HELP)."""
    parser = build_parser()
    args, beam_args = parser.parse_known_args(argv)
    flags = BeamFlags(beam_args)
    try:
        config = config_from_args(args)
        if not flags.local_only:  # a flag Beam does not know is an error before any work
            _ = flags.options
    except ConfigError as err:
        parser.error(str(err))  # exits 2 with the usage line
    if flags.local:
        # This process owns the runner: cap malloc arenas before it starts its threads
        # and worker processes, and give its large buffers back when they are freed.
        limit_malloc_arenas()
        return_large_blocks()
    with QuietInterrupt() as interrupt, _run_log() as run_log:
        try:
            result = shard_images(config, flags)
        except InputError as err:
            print(f"error: {err}", file=sys.stderr)
            return exit_codes.BAD_INPUT
        except ErrorBudgetExceeded as err:
            print(f"error: {err}", file=sys.stderr)
            return exit_codes.TOO_MANY_REJECTED
        except KeyboardInterrupt:
            interrupt.say(
                f"interrupted: nothing was written to {config.output} (the shards of an "
                "earlier run there are unchanged); the same command starts again"
            )
            return exit_codes.INTERRUPTED
        except JobFailed as err:
            run_log.keep(err)
            print(
                f"error: the sharding job failed while {err} (not one input: those are "
                f"dead-lettered); traceback and log: {run_log.path}",
                file=sys.stderr,
            )
            return exit_codes.JOB_FAILED
    print(result.summary())
    return exit_codes.OK


class _RunLog:
    """Every log record of one run, tracebacks included, in a local file that is kept
    only when the job fails: the terminal gets one line per problem, the file the rest."""

    def __init__(self):
        stamp = dt.datetime.now().strftime("%Y%m%dT%H%M%S")
        name = f"imagepipe-shard_images-{stamp}-{os.getpid()}.log"
        self.path = os.path.join(tempfile.gettempdir(), name)
        self.kept = False
        self.handler = logging.FileHandler(self.path, delay=True, encoding="utf-8")
        self.handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
        )
        self.handler.setLevel(logging.INFO)

    def keep(self, err: BaseException) -> None:
        """Keep the file, ending with the failure's whole traceback."""
        self.kept = True
        self.handler.flush()
        with open(self.path, "a", encoding="utf-8") as file:
            file.write("the sharding job failed:\n")
            file.write("".join(traceback.format_exception(err)))


@contextmanager
def _run_log() -> Iterator[_RunLog]:
    run_log = _RunLog()
    root = logging.getLogger()
    root.addHandler(run_log.handler)
    try:
        yield run_log
    finally:
        root.removeHandler(run_log.handler)
        run_log.handler.close()
        if not run_log.kept and os.path.exists(run_log.path):
            os.remove(run_log.path)


class _OneLineFormatter(logging.Formatter):
    """A record's first line, without its traceback (which goes to the run's log file)."""

    def format(self, record: logging.LogRecord) -> str:
        plain = logging.makeLogRecord(
            {**record.__dict__, "exc_info": None, "exc_text": None, "stack_info": None}
        )
        return (super().format(plain).splitlines() or [""])[0]


# What every worker process of Beam's local runner reports at start (relayed through the
# runner's job service as warnings): they concern a pickled interactive __main__ session,
# which this job, run as a module, never has.
_HARMLESS_WORKER_NOTICES = ("No semi_persistent_directory found", "No session file found")


def _not_a_harmless_worker_notice(record: logging.LogRecord) -> bool:
    message = record.getMessage()
    return not any(notice in message for notice in _HARMLESS_WORKER_NOTICES)


def configure_logging() -> None:
    """Progress (INFO) on stdout, problems (WARNING and up) on stderr; Beam's own lines
    only when they are warnings.

    Airflow's Beam operator logs a job's stdout as info and its stderr as warnings, so
    progress on stderr would read as trouble in the task log."""
    formatter = _OneLineFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    progress, problems = logging.StreamHandler(sys.stdout), logging.StreamHandler(sys.stderr)
    progress.addFilter(lambda record: record.levelno < logging.WARNING)
    problems.setLevel(logging.WARNING)
    root = logging.getLogger()
    for handler in (progress, problems):
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.getLogger("apache_beam").setLevel(logging.WARNING)
    logging.getLogger("apache_beam.runners.portability.local_job_service").addFilter(
        _not_a_harmless_worker_notice
    )


if __name__ == "__main__":
    configure_logging()
    sys.exit(run())

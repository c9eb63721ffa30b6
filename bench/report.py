"""Turn bench/results/*.json into a Markdown table, a PNG plot and docs/benchmarks.md's table."""

from __future__ import annotations

import json
from pathlib import Path

from bench import common

START, END = "<!-- bench:start -->", "<!-- bench:end -->"


def _rate(summary: dict) -> str:
    return f"{summary['median']:,.0f} (±{summary['spread'] * 50:.0f}%)"


def _round_rows(r: dict) -> list[tuple[str, str, str]]:
    """The pipeline against its ceiling round by round (timed alternately)."""
    if "ratio_vs_ceiling_by_round" not in r:  # results written before the rounds were
        return []
    rounds = r["ratio_vs_ceiling_by_round"]
    return [(
        "same, each round (pipeline and ceiling timed alternately)",
        ", ".join(f"{value:.2f}" for value in rounds["values"]),
        f"worst round {rounds['min']:.2f} (goal at least 0.9 in every round)",
    )]  # fmt: skip


def rows(results: dict) -> list[tuple[str, str, str]]:
    """(what, measured, ratio) rows; each benchmark adds the ones it has."""
    out = []
    if "input_pipeline" in results:
        r = results["input_pipeline"]
        ips = r["images_per_second"]
        out += [
            ("input pipeline vs decode ceiling (images/s)",
             f"{_rate(ips['pipeline'])} vs {_rate(ips['ceiling'])}",
             f"ratio_vs_ceiling {r['ratio_vs_ceiling']:.2f}"),
            *_round_rows(r),
            ("input pipeline vs image_dataset_from_directory",
             f"{_rate(ips['pipeline'])} vs {_rate(ips['naive'])}",
             f"ratio_vs_naive {r['ratio_vs_naive']:.2f}"),
            (f"same, shards stored at max side {r['params']['resized_shards_max_side']} px",
             f"{_rate(ips['pipeline_resized_shards'])} vs ceiling "
             f"{_rate(ips['ceiling_resized_shards'])}",
             f"vs ceiling {r['resized_shards_ratio_vs_ceiling']:.2f}, "
             f"vs naive {r['resized_shards_ratio_vs_naive']:.2f}"),
        ]  # fmt: skip
    if "sharding" in results:
        r = results["sharding"]
        n = str(r["largest_size"])
        runs, lines = r["runs"], r["fixed_and_per_image_cost"]
        out += [
            (f"Beam job (2 workers) vs Python loop, {n} images (images/s)",
             f"{runs['beam_2_workers'][n]['images_per_second']:,.0f} vs "
             f"{runs['python_loop'][n]['images_per_second']:,.0f}",
             f"ratio_vs_naive {r['ratio_vs_naive']:.2f}"),
            ("Beam job 2 vs 1 worker processes",
             f"{runs['beam_2_workers'][n]['images_per_second']:,.0f} vs "
             f"{runs['beam_1_worker'][n]['images_per_second']:,.0f}",
             f"ratio_2_vs_1_workers {r['ratio_2_vs_1_workers']:.2f}"),
            ("fixed start-up s / per-image ms (Beam 2 workers, Python loop)",
             f"{lines['beam_2_workers']['fixed_seconds']:.1f} s / "
             f"{lines['beam_2_workers']['seconds_per_image'] * 1e3:.2f} ms, "
             f"{lines['python_loop']['fixed_seconds']:.1f} s / "
             f"{lines['python_loop']['seconds_per_image'] * 1e3:.2f} ms",
             f"marginal_ratio_vs_naive {r['marginal_ratio_vs_naive']:.2f}"),
            ("Beam job scaling: images/s at "
             + ", ".join(sorted(runs["beam_2_workers"], key=int))
             + " images (in-process; 1; 2 worker processes)",
             "; ".join(
                 ", ".join(f"{runs[m][k]['images_per_second']:,.0f}"
                           for k in sorted(runs[m], key=int))
                 for m in ("beam_in_process", "beam_1_worker", "beam_2_workers")
             ),
             f"marginal_ratio_2_vs_1_workers {r['marginal_ratio_2_vs_1_workers']:.2f}"),
            (f"Beam job default (runner picks by size) vs Python loop, {n} images",
             f"{runs['beam_default'][n]['images_per_second']:,.0f} vs "
             f"{runs['python_loop'][n]['images_per_second']:,.0f}",
             f"ratio_default_vs_naive {r['ratio_default_vs_naive']:.2f}"),
            ("fixed start-up s / per-image ms (Beam in one process)",
             f"{lines['beam_in_process']['fixed_seconds']:.1f} s / "
             f"{lines['beam_in_process']['seconds_per_image'] * 1e3:.2f} ms",
             f"ratio_2_workers_vs_in_process {r['ratio_2_workers_vs_in_process']:.2f}"),
        ]  # fmt: skip
        if "beam_2_threads" in runs:
            threads = runs["beam_2_threads"]
            validation = r["validation_seconds_by_processes"]
            out += [
                (f"Beam job on 2 worker threads (one process) vs Python loop, {n} images",
                 f"{threads[n]['images_per_second']:,.0f} vs "
                 f"{runs['python_loop'][n]['images_per_second']:,.0f}",
                 f"ratio_2_threads_vs_naive {r['ratio_2_threads_vs_naive']:.2f}"),
                ("Beam job 2 threads vs 1 thread; fixed s / per-image ms on 2 threads",
                 f"{threads[n]['images_per_second']:,.0f} vs "
                 f"{runs['beam_in_process'][n]['images_per_second']:,.0f}; "
                 f"{lines['beam_2_threads']['fixed_seconds']:.1f} s / "
                 f"{lines['beam_2_threads']['seconds_per_image'] * 1e3:.2f} ms",
                 f"ratio_2_threads_vs_1_thread {r['ratio_2_threads_vs_1_thread']:.2f}"),
                (f"machine ceiling: validation alone, {n} images, 1 vs 2 pool processes (s)",
                 f"{validation['1']['median']:.2f} vs {validation['2']['median']:.2f}",
                 f"validation_ratio_2_vs_1_processes "
                 f"{r['validation_ratio_2_vs_1_processes']:.2f}"),
            ]  # fmt: skip
    if "training" in results:
        r = results["training"]
        ips = r["images_per_second"]
        out += [
            ("training, 2 vs 1 workers, one core each (images/s)",
             f"{_rate(ips['2_workers'])} vs {_rate(ips['1_worker'])}",
             f"ratio_2_vs_1_workers {r['ratio_2_vs_1_workers']:.2f} (2.0 = linear)"),
        ]  # fmt: skip
        if "ratio_2_vs_1_workers_sync_batch_norm" in r:
            out.append(
                ("same, 2 workers with BatchNorm over the global batch (--batch-norm sync)",
                 f"{_rate(ips['2_workers_sync_batch_norm'])} vs {_rate(ips['1_worker'])}",
                 f"ratio_2_vs_1_workers_sync_batch_norm "
                 f"{r['ratio_2_vs_1_workers_sync_batch_norm']:.2f}")
            )  # fmt: skip
        if "ratio_2_vs_1_workers_large_batch" in r:
            out.append(
                (f"same, per-worker batch {r['large_batch_per_worker']} instead of "
                 f"{r['params']['batch_per_worker']}",
                 f"{_rate(ips['2_workers_large_batch'])} vs {_rate(ips['1_worker_large_batch'])}",
                 f"ratio_2_vs_1_workers_large_batch "
                 f"{r['ratio_2_vs_1_workers_large_batch']:.2f}")
            )  # fmt: skip
        if "ratio_input_service_vs_in_process" in r:
            out.append(
                ("training, 1 worker on 1 core: input on a tf.data service worker on the "
                 "other core vs on its own core (images/s)",
                 f"{_rate(ips['1_worker_input_service'])} vs {_rate(ips['1_worker'])}",
                 f"ratio_input_service_vs_in_process "
                 f"{r['ratio_input_service_vs_in_process']:.2f}")
            )  # fmt: skip
        if "ratio_input_service_vs_synthetic" in r:
            two = r.get("ratio_input_service_2_workers_vs_in_process")
            out.append(
                ("same, the ceiling of any input placement: the trainer on synthetic input "
                 "vs decoding on its own core; the service against that ceiling",
                 f"{_rate(ips['1_worker_synthetic'])} vs {_rate(ips['1_worker'])}; "
                 + (f"2 service workers {_rate(ips['1_worker_input_service_2'])}"
                    if two else "2 service workers: not run (needs 3 cores)"),
                 f"ratio_synthetic_vs_in_process {r['ratio_synthetic_vs_in_process']:.2f}, "
                 f"ratio_input_service_vs_synthetic {r['ratio_input_service_vs_synthetic']:.2f}"
                 + (f", 2 service workers vs in-process {two:.2f}" if two else ""))
            )  # fmt: skip
        out += [
            ("training on shards vs synthetic in-memory input",
             f"{_rate(ips['1_worker'])} vs {_rate(ips['1_worker_synthetic'])}",
             f"input_bound_share {r['input_bound_share']:.2f}"),
        ]  # fmt: skip
        if "ratio_cached_vs_synthetic_input" in r:
            out.append(
                ("same, the trainer's default --cache auto (decoded images in memory after "
                 "the first epoch)",
                 f"{_rate(ips['1_worker_cached'])} vs {_rate(ips['1_worker_synthetic'])}",
                 f"ratio_cached_vs_synthetic_input {r['ratio_cached_vs_synthetic_input']:.2f}")
            )  # fmt: skip
        for workers, split in r.get("step_time_breakdown_ms", {}).items():
            out.append(
                (f"training step, {workers.replace('_', ' ')} (ms): compute + all-reduce + "
                 "input wait",
                 f"{split['step']:.0f} = {split['compute']:.0f} + {split['all_reduce']:.0f} + "
                 f"{split['input_wait']:.0f}",
                 f"all-reduce share {split['all_reduce'] / split['step']:.2f}")
            )  # fmt: skip
    if "orchestration" in results:
        r = results["orchestration"]
        out.append(
            ("whole DAG run vs sum of its tasks (s): the `airflow dags test` process",
             f"{r['wall_seconds']['median']:.1f} vs {r['sum_task_seconds']['median']:.1f}"
             + (f" (between tasks {r['between_tasks_seconds']['median']:.1f}, around the run "
                f"in `airflow dags test` {r['around_the_run_seconds']['median']:.1f})"
                if "around_the_run_seconds" in r else ""),
             f"ratio_wall_vs_stages {r['ratio_wall_vs_stages']:.2f}")
        )  # fmt: skip
        if "ratio_run_vs_stages" in r:
            out.append(
                ("same, the run as Airflow records it (its page's duration: no CLI start or "
                 "parsing)",
                 f"{r['run_seconds']['median']:.1f} vs {r['sum_task_seconds']['median']:.1f}",
                 f"ratio_run_vs_stages {r['ratio_run_vs_stages']:.2f} (goal at most 1.10)")
            )  # fmt: skip
        if "ratio_second_vs_first_run" in r:
            second, first = r["second_run_wall_seconds"], r["wall_seconds"]
            out.append(
                ("second DAG run, inputs unchanged (shards reused), vs the first (s)",
                 f"{second['median']:.1f} vs {first['median']:.1f} (shard_images "
                 f"{r['second_run_shard_seconds']['median']:.1f})",
                 f"ratio_second_vs_first_run {r['ratio_second_vs_first_run']:.2f}")
            )  # fmt: skip
        if "ratio_reuse_vs_first_run" in r:
            reuse, first = r["reuse_run_wall_seconds"], r["wall_seconds"]
            recorded = (
                f"; as Airflow records the runs {r['reuse_run_seconds']['median']:.1f} vs "
                f"{r['run_seconds']['median']:.1f}"
                if "ratio_reuse_vs_first_run_recorded" in r
                else ""
            )
            out.append(
                ("DAG run with reuse_training, inputs unchanged (shards and training reused), "
                 "vs the first (s): the `airflow dags test` process" + recorded,
                 f"{reuse['median']:.1f} vs {first['median']:.1f} (shard_images "
                 f"{r['reuse_run_task_seconds']['shard_images']['median']:.1f}, train "
                 f"{r['reuse_run_task_seconds']['train']['median']:.1f}, evaluate "
                 f"{r['reuse_run_task_seconds']['evaluate']['median']:.1f})",
                 f"ratio_reuse_vs_first_run {r['ratio_reuse_vs_first_run']:.2f}"
                 + (f", ratio_reuse_vs_first_run_recorded "
                    f"{r['ratio_reuse_vs_first_run_recorded']:.2f}"
                    if "ratio_reuse_vs_first_run_recorded" in r else "")
                 + " (goal at most 0.25)")
            )  # fmt: skip
    if "warm_start" in results:
        r = results["warm_start"]
        accuracy, p = r["accuracy"], r["params"]
        out.append(
            (f"warm start: {p['warm_epochs']} epochs from the served model vs {p['epochs']} "
             f"from scratch, {p['images_first']} + 10 % new images (held-out accuracy)",
             f"{accuracy['warm']:.3f} vs {accuracy['cold_full']:.3f} ({p['warm_epochs']} "
             f"epochs from scratch: {accuracy['cold_short']:.3f})",
             f"ratio_warm_vs_cold_accuracy {r['ratio_warm_vs_cold_accuracy']:.2f}, "
             f"ratio_warm_vs_cold_seconds {r['ratio_warm_vs_cold_seconds']:.2f}")
        )  # fmt: skip
    if "data_statistics" in results:
        r = results["data_statistics"]
        seconds, p = r["seconds"], r["params"]
        out.append(
            (f"sharding job with data statistics and perceptual hashes vs without, "
             f"{p['images']:,} images, at the job's default runner mode (s)",
             f"{seconds['default']['with']['median']:.1f} "
             f"(±{seconds['default']['with']['spread'] / 2:.0%}) vs "
             f"{seconds['default']['without']['median']:.1f} "
             f"(±{seconds['default']['without']['spread'] / 2:.0%}); on 2 worker threads "
             f"{seconds['threads']['with']['median']:.1f} vs "
             f"{seconds['threads']['without']['median']:.1f}",
             f"ratio_with_vs_without_seconds {r['ratio_with_vs_without_seconds']:.2f} "
             f"(goal at most 1.15; on threads "
             f"{r['ratio_with_vs_without_seconds_threads']:.2f})")
        )  # fmt: skip
    if "sharding_scale" in results:
        out += scale_rows(results["sharding_scale"])
    return out


def scale_rows(result: dict) -> list[tuple[str, str, str]]:
    """One row per size class and count: the job at its default beside the loop."""
    out = []
    mb = 2**20
    for row in result["rows"]:
        job, loop = row["job"], row["loop"]
        workers = job["worker_peak_bytes"]
        memory = f"driver {job['driver_peak_bytes'] / mb:.0f} MB" + (
            f", workers {', '.join(f'{w / mb:.0f}' for w in workers)} MB" if workers else ""
        )
        cpu = lambda r: r["cpu_ms_per_image"]  # noqa: E731
        measured = (
            f"{job['wall_seconds']:.1f} s vs {loop['wall_seconds']:.1f} s "
            f"({job['images_per_second']:.0f} vs {loop['images_per_second']:.0f} images/s); "
            f"CPU ms/image user+sys {cpu(job)['user']:.2f}+{cpu(job)['sys']:.2f} vs "
            f"{cpu(loop)['user']:.2f}+{cpu(loop)['sys']:.2f}; written per output byte "
            f"{job['written_per_output_byte']['write_calls']:.2f} (write calls), "
            f"{job['written_per_output_byte']['storage']:.2f} (to storage); {memory}; "
            f"planning {job['planning_seconds'] or 0:.2f} s; mode {job['runner_mode']}"
        )
        ratio = (
            f"ratio_job_vs_loop_speed {row['ratio_job_vs_loop_speed']:.2f}, "
            f"ratio_job_vs_loop_cpu {row['ratio_job_vs_loop_cpu']:.2f}"
        )
        if "ratio_default_vs_best_mode" in row:
            best = min(row["mode_seconds"], key=row["mode_seconds"].get)
            ratio += (
                f", ratio_default_vs_best_mode {row['ratio_default_vs_best_mode']:.2f} ({best})"
            )
        out.append(
            (f"sharding {row['images']:,} {row['size_class']}: the job at its default vs the "
             "one-process loop", measured, ratio)
        )  # fmt: skip
    return out


def table(results: dict) -> str:
    machine = next(iter(results.values()))["machine"]
    lines = [
        f"Measured on {machine['cores']} cores ({machine['cpu_model']}), TensorFlow "
        f"{machine['tensorflow']}; median of the repeats (± half the spread).",
        "",
        "| benchmark | measured | ratio |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {what} | {measured} | {ratio} |" for what, measured, ratio in rows(results)]
    return "\n".join(lines) + "\n"


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratios = {}
    for name, result in results.items():
        for key, value in result.items():
            if isinstance(value, float) and ("ratio" in key or "share" in key):
                ratios[f"{name}: {key}"] = value
    fig, ax = plt.subplots(figsize=(9, 0.4 * len(ratios) + 1.2))
    labels = list(ratios)
    ax.barh(labels, [ratios[k] for k in labels], color="#4878a8")
    ax.axvline(1.0, color="grey", linewidth=1, linestyle="--")
    for index, key in enumerate(labels):
        ax.text(ratios[key], index, f" {ratios[key]:.2f}", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ratio (1.0 = parity)")
    ax.set_title("imagepipe benchmarks")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def load(results_dir: Path) -> dict:
    return {
        p.stem: json.loads(p.read_text())
        for p in sorted(results_dir.glob("*.json"))
        if p.stem
        in (
            "input_pipeline",
            "sharding",
            "training",
            "orchestration",
            "warm_start",
            "data_statistics",
            "sharding_scale",
        )
    }


def report(results_dir: Path = common.RESULTS, readme: Path | None = None) -> str:
    results = load(results_dir)
    if not results:
        raise SystemExit(f"no results in {results_dir}: run `make bench` first")
    text = table(results)
    (results_dir / "results.md").write_text(text)
    plot(results, results_dir / "results.png")
    if readme is not None:
        content = readme.read_text()
        before, _, rest = content.partition(START)
        _, _, after = rest.partition(END)
        readme.write_text(f"{before}{START}\n{text}{END}{after}")
    print(text)
    return text


if __name__ == "__main__":
    report(readme=common.REPO / "docs" / "benchmarks.md")

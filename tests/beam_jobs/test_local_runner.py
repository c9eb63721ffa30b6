import pytest
from apache_beam.options.pipeline_options import DirectOptions, StandardOptions

from beam_jobs.local_runner import LOCAL_RUNNER, LocalMode, choose_local_mode, predicted_seconds
from beam_jobs.shard_images import pipeline_options


def test_tiny_jobs_run_on_one_thread():
    assert choose_local_mode(10, cores=2) == LocalMode("in_memory", 1)


def test_mid_sized_jobs_on_few_cores_run_on_threads_in_this_process():
    # Threads start nothing and overlap decoding, hashing and I/O (they release the GIL).
    assert choose_local_mode(3000, cores=2) == LocalMode("multi_threading", 2)


def test_large_jobs_get_one_worker_process_per_core():
    assert choose_local_mode(100_000, cores=2) == LocalMode("multi_processing", 2)
    assert choose_local_mode(100_000, cores=8) == LocalMode("multi_processing", 8)
    assert choose_local_mode(100, cores=8).running_mode != "multi_processing"


def test_more_cores_move_the_crossover_to_processes_down():
    def crossover(cores):
        return next(
            n
            for n in range(0, 10**6, 100)
            if choose_local_mode(n, cores).running_mode == "multi_processing"
        )

    assert crossover(16) < crossover(8) < crossover(4)


def test_the_choice_is_the_fastest_predicted_mode():
    for cores in (2, 4, 8):
        for n in (10, 1000, 10_000, 100_000):
            chosen = predicted_seconds(choose_local_mode(n, cores), n)
            for mode in ("in_memory", "multi_threading", "multi_processing"):
                workers = 1 if mode == "in_memory" else cores
                assert chosen <= predicted_seconds(LocalMode(mode, workers), n)


def test_one_core_never_spawns_workers():
    assert choose_local_mode(10**6, cores=1) == LocalMode("in_memory", 1)


@pytest.mark.parametrize("runner", [[], ["--runner=DirectRunner"], ["--runner", "FnApiRunner"]])
def test_local_runner_is_named_explicitly(runner):
    # DirectRunner would first try Prism, which downloads a binary at run time.
    assert pipeline_options(runner).view_as(StandardOptions).runner == LOCAL_RUNNER


def test_asking_for_workers_means_worker_processes():
    direct = pipeline_options(["--direct_num_workers=2"]).view_as(DirectOptions)
    assert (direct.direct_running_mode, direct.direct_num_workers) == ("multi_processing", 2)


def test_other_runners_pass_through():
    options = pipeline_options(["--runner=DataflowRunner", "--project=p"])
    assert options.view_as(StandardOptions).runner == "DataflowRunner"

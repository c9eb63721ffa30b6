import pytest
from apache_beam.options.pipeline_options import DirectOptions, StandardOptions

from beam_jobs.local_runner import LOCAL_RUNNER, LocalMode, choose_local_mode
from beam_jobs.shard_images import pipeline_options


def test_small_jobs_stay_in_one_process():
    assert choose_local_mode(100, cores=2) == LocalMode("in_memory", 1)


def test_large_jobs_get_one_worker_process_per_core():
    assert choose_local_mode(100_000, cores=2) == LocalMode("multi_processing", 2)
    assert choose_local_mode(100_000, cores=8) == LocalMode("multi_processing", 8)


def test_more_cores_move_the_crossover_down():
    def crossover(cores):
        return next(n for n in range(0, 50_000, 100) if choose_local_mode(n, cores).workers > 1)

    assert crossover(8) < crossover(4) < crossover(2)


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

import pytest

from training import diagnosis


@pytest.mark.parametrize(
    ("step", "compute", "share"), [(0.1, 0.05, 0.5), (0.1, 0.1, 0.0), (0.1, 0.2, 0.0), (0, 1, 0.0)]
)
def test_input_wait_is_the_step_time_compute_does_not_explain(step, compute, share):
    assert diagnosis.input_wait_share(step, compute) == pytest.approx(share)


def test_advice_names_the_cheapest_remedies_when_input_bound():
    text = diagnosis.advice(
        0.42,
        images_per_second=300,
        ceiling_per_worker=200,
        num_workers=2,
        image_size=64,
        max_side=0,
        cached=False,
    )
    assert text.startswith("input-bound 42%")
    assert "--cache memory" in text and "max_side 128" in text
    assert "decode ceiling 400 images/s over 2 worker(s), training 300" in text


def test_advice_says_when_input_is_not_the_problem():
    text = diagnosis.advice(
        0.05,
        images_per_second=300,
        ceiling_per_worker=2000,
        num_workers=1,
        image_size=64,
        max_side=128,
        cached=True,
    )
    assert text.startswith("compute-bound: input waits 5%")


def test_advice_for_cached_images_never_blames_decoding():
    """Decoded images from the cache: a large gap is not a reason to shrink the shards or
    add decoding cores."""
    text = diagnosis.advice(
        0.7,
        images_per_second=300,
        ceiling_per_worker=200,
        num_workers=1,
        image_size=64,
        max_side=0,
        cached=True,
    )
    assert "max_side" not in text and "decode ceiling" not in text and "--cache" not in text
    assert "decoding is not the cause" in text


class _Shards:
    class folder:
        max_side = 0

    def num_records(self, split):
        return 400


class _Epoch:
    def __init__(self, epoch):
        self.epoch, self.images_per_second, self.seconds = epoch, 100.0, 3.2
        self.input_wait_share = None


def _observed(monkeypatch, *, is_chief, cache, epochs=3) -> dict:
    from training.config import DataConfig

    monkeypatch.setattr(diagnosis, "decode_ceiling", lambda *args, **kwargs: 150.0)
    watch = diagnosis.InputDiagnosis(
        measure_compute_step=lambda: 0.1,  # 0.32 s a step: 69% outside the probe
        shard_set=_Shards(),
        is_chief=is_chief,
        num_workers=2,
        global_batch_size=32,
        input_config=DataConfig(cache=cache),
    )
    for epoch in range(1, epochs + 1):
        watch.observe(_Epoch(epoch), first_in_process=epoch == 1)
    return watch.report


@pytest.mark.parametrize("cache", ["memory", ""])
def test_only_the_chief_advises_and_a_cached_run_is_not_told_to_shrink_shards(monkeypatch, cache):
    assert "advice" not in _observed(monkeypatch, is_chief=False, cache=cache)
    assert "one epoch only" not in _observed(monkeypatch, is_chief=True, cache=cache, epochs=2)
    advice = _observed(monkeypatch, is_chief=True, cache=cache)["advice"]
    if cache:
        assert "decoding is not the cause" in advice and "max_side" not in advice
    else:
        assert advice.startswith("input-bound 69%") and "max_side 128" in advice

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

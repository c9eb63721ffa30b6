import pytest

from beam_jobs.config import ConfigError, parse_split_fractions
from beam_jobs.splits import assign_split, hash_fraction, hash_fractions

FRACTIONS = {"train": 0.8, "validation": 0.1, "test": 0.1}


def test_split_is_a_pure_function_of_the_key():
    keys = [f"cat/{i}.jpg" for i in range(500)]
    first = [assign_split(k, FRACTIONS) for k in keys]
    # Adding other images (and asking in another order) moves nothing.
    more = [f"dog/{i}.jpg" for i in range(500)]
    for key in reversed(more + keys):
        assign_split(key, FRACTIONS)
    assert [assign_split(k, FRACTIONS) for k in keys] == first


def test_fractions_are_honoured_roughly():
    counts = {"train": 0, "validation": 0, "test": 0}
    for i in range(10_000):
        counts[assign_split(f"img/{i}.png", FRACTIONS)] += 1
    assert 7700 < counts["train"] < 8300
    assert 800 < counts["validation"] < 1200
    assert 800 < counts["test"] < 1200


def test_zero_fraction_split_gets_nothing():
    fractions = {"train": 0.7, "validation": 0.3, "test": 0.0}
    assert {assign_split(f"k{i}", fractions) for i in range(2000)} == {"train", "validation"}


def test_splits_are_stable_across_versions_and_processes():
    # Golden values: a change here would move already-split images (for example a
    # switch to Python's per-process salted hash()). Update only with a new dataset.
    assert hash_fraction("circle/circle_00000.jpg") == pytest.approx(0.49927669921724777)
    assert [assign_split(f"a/{i}.jpg", FRACTIONS) for i in range(8)] == [
        "train",
        "train",
        "train",
        "test",
        "validation",
        "validation",
        "train",
        "validation",
    ]


def test_one_hash_gives_the_split_fraction_and_an_independent_order():
    """The planner hashes each key once: the first fraction is the split's (unchanged),
    the second orders a split's images into shards, uncorrelated with the first."""
    keys = [f"img/{i}.png" for i in range(4000)]
    pairs = [hash_fractions(k) for k in keys]
    assert [first for first, _ in pairs] == [hash_fraction(k) for k in keys]
    seconds = [second for _, second in pairs]
    assert all(0 <= s < 1 for s in seconds) and len(set(seconds)) == len(keys)
    # Within one split (the first fraction in a narrow range) the order is still uniform.
    within = [second for first, second in pairs if first < 0.1]
    assert abs(sum(within) / len(within) - 0.5) < 0.05
    mean = [sum(x) / len(x) for x in zip(*pairs, strict=True)]
    covariance = sum((a - mean[0]) * (b - mean[1]) for a, b in pairs) / len(pairs)
    assert abs(covariance) < 0.005  # of a 1/12 variance: independent halves of the digest


def test_parse_split_fractions_fills_missing_with_zero():
    assert parse_split_fractions("train=0.9,validation=0.1") == {
        "train": 0.9,
        "validation": 0.1,
        "test": 0.0,
    }


@pytest.mark.parametrize(
    "text", ["train=0.5", "train=0.5,valid=0.5", "train=x", "validation=1", "train=1.2,test=-0.2"]
)
def test_parse_split_fractions_rejects_bad_input(text):
    with pytest.raises(ConfigError):
        parse_split_fractions(text)

"""The publish decision: the absolute gate, and the blessing against the serving model."""

import pytest

from training.gate import (
    MIN_CLASS_EXAMPLES,
    AccuracyGateFailed,
    BlessingRules,
    bless,
    check_gate,
    verdict_line,
)

ENOUGH = MIN_CLASS_EXAMPLES


def _scores(accuracy: float, per_class: dict[str, float], examples: int = ENOUGH) -> dict:
    return {
        "accuracy": accuracy,
        "per_class_accuracy": per_class,
        "per_class_examples": dict.fromkeys(per_class, examples),
        "num_examples": examples * len(per_class),
        "split": "test",
    }


def _evaluation(candidate: dict, baseline: dict | None, **extra) -> dict:
    evaluation = dict(candidate, **extra)
    if baseline is not None:
        evaluation["baseline"] = {**baseline, "version": 3, "path": "models/m/3"}
    return evaluation


SERVING = _scores(0.90, {"a": 0.90, "b": 0.90})


@pytest.mark.parametrize(
    ("candidate", "blessed", "reason"),
    [
        (_scores(0.90, {"a": 0.90, "b": 0.90}), True, None),  # as good
        (_scores(0.95, {"a": 0.99, "b": 0.91}), True, None),  # better
        (_scores(0.895, {"a": 0.89, "b": 0.90}), True, None),  # within max_regression
        (_scores(0.85, {"a": 0.85, "b": 0.85}), False, "accuracy 0.850 is 0.050 below"),
        (_scores(0.90, {"a": 0.98, "b": 0.82}), False, "class b accuracy 0.820 is 0.080 below"),
    ],
)
def test_a_candidate_is_blessed_only_when_not_worse_than_the_serving_model(
    candidate, blessed, reason
):
    verdict = bless(_evaluation(candidate, SERVING))
    assert verdict["blessed"] is blessed and verdict["compared"]
    assert verdict["baseline_version"] == 3 and verdict["baseline_accuracy"] == 0.90
    if reason:
        assert any(reason in line for line in verdict["reasons"]), verdict["reasons"]
        assert verdict_line(verdict).startswith(f"not blessed: {reason}")
    else:
        assert verdict["reasons"] == []
        assert verdict_line(verdict).startswith("blessed: ")


def test_a_class_with_too_few_examples_to_measure_is_shown_but_not_compared():
    few = _scores(0.90, {"a": 0.98, "b": 0.82}, examples=ENOUGH - 1)
    verdict = bless(_evaluation(few, SERVING))
    assert verdict["blessed"] and verdict["class_changes"] == {"a": 0.08, "b": -0.08}


def test_the_tolerances_are_the_callers():
    candidate = _scores(0.85, {"a": 0.85, "b": 0.85})
    assert bless(_evaluation(candidate, SERVING), BlessingRules(max_regression=0.06))["blessed"]
    strict = BlessingRules(max_regression=0.0, max_class_regression=0.0)
    assert not bless(_evaluation(_scores(0.899, {"a": 0.9, "b": 0.898}), SERVING), strict)[
        "blessed"
    ]


@pytest.mark.parametrize(
    ("skipped", "warning"),
    [
        (None, "no baseline model: blessed on the gate alone"),
        ("the serving model's labels (2: a, c) are not this run's", "the serving model's labels"),
    ],
)
def test_without_a_comparable_baseline_the_gate_alone_decides_and_says_why(skipped, warning):
    extra = {"baseline_skipped": skipped} if skipped else {}
    verdict = bless(_evaluation(_scores(0.3, {"a": 0.3, "b": 0.3}), None, **extra))
    assert verdict["blessed"] and not verdict["compared"]
    assert verdict["warning"].startswith(warning)
    assert verdict_line(verdict) == f"blessed without a comparison: {verdict['warning']}"


def test_the_absolute_gate_still_applies():
    with pytest.raises(AccuracyGateFailed, match=r"accuracy 0\.500 on 40 test images is below"):
        check_gate(_scores(0.5, {"a": 0.5, "b": 0.5}), 0.6)
    check_gate(_scores(0.6, {"a": 0.6, "b": 0.6}), 0.6)


def test_a_class_is_judged_on_f1_so_a_model_calling_everything_one_class_is_no_standard():
    """Within a class, accuracy is recall: a serving model that calls every image `a` has
    `a` accuracy 1.0, and a far better candidate must not be refused for scoring 0.9."""
    serving = {
        **_scores(0.5, {"a": 1.0, "b": 0.0}),
        "per_class_f1": {"a": 0.667, "b": 0.0},
    }
    candidate = {
        **_scores(0.9, {"a": 0.9, "b": 0.9}),
        "per_class_f1": {"a": 0.9, "b": 0.9},
    }
    verdict = bless(_evaluation(candidate, serving))
    assert verdict["blessed"] and verdict["class_metric"] == "F1", verdict["reasons"]
    worse = {**candidate, "per_class_f1": {"a": 0.9, "b": 0.0}}
    serving_f1 = {**serving, "per_class_f1": {"a": 0.667, "b": 0.5}}
    assert bless(_evaluation(worse, serving_f1))["reasons"] == [
        "class b F1 0.000 is 0.500 below the serving model's 0.500 on 20 images (allowed 0.05)"
    ]

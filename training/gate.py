"""What a model must show to be published: the absolute accuracy gate, and its blessing
against the model in production.

A schedule left unattended needs the second: a run on a bad day (a mislabelled batch,
an unlucky seed) passes any absolute bar and would still replace a better model. As
TFX's Evaluator does, the candidate is blessed only when it is not worse than the served
baseline scored on the same held-out records, overall and per class. Light (no
TensorFlow): the orchestrator decides here from the evaluation's numbers.
"""

from __future__ import annotations

from dataclasses import dataclass


class AccuracyGateFailed(RuntimeError):
    """The model is worse than the gate: it must not be published."""


def check_gate(evaluation: dict, min_accuracy: float) -> None:
    if evaluation["accuracy"] < min_accuracy:
        raise AccuracyGateFailed(
            f"accuracy {evaluation['accuracy']:.3f} on {evaluation['num_examples']} "
            f"{evaluation['split']} images is below the gate {min_accuracy:.3f}; "
            "the model is not published"
        )


# A class is compared only with at least this many held-out examples: below it one image
# moves its accuracy by more than any sensible tolerance (a 1-in-10 class: 0.1).
MIN_CLASS_EXAMPLES = 20
# Accuracies are ratios of counts: a drop equal to the tolerance must not fail on rounding.
TIE = 1e-9
# Accuracy changes a person should see in the verdict (per class), even when allowed.
NOTABLE_CLASS_CHANGE = 0.02


@dataclass(frozen=True)
class BlessingRules:
    max_regression: float = 0.01
    max_class_regression: float = 0.05
    min_class_examples: int = MIN_CLASS_EXAMPLES


def bless(evaluation: dict, rules: BlessingRules | None = None) -> dict:
    """The verdict on the candidate of `evaluation` (see training.evaluate): blessed, the
    reasons it is not, why no comparison was made (no baseline, another label map), and the
    per-class changes that matter. The absolute gate is `check_gate`'s, apart."""
    rules = rules or BlessingRules()
    baseline = evaluation.get("baseline")
    verdict: dict = {
        "blessed": True,
        "reasons": [],
        "compared": baseline is not None,
        "accuracy": evaluation["accuracy"],
        "baseline_accuracy": baseline["accuracy"] if baseline else None,
        "baseline_version": baseline.get("version") if baseline else None,
        "class_changes": {},
        "rules": {
            "max_regression": rules.max_regression,
            "max_class_regression": rules.max_class_regression,
            "min_class_examples": rules.min_class_examples,
        },
    }
    if baseline is None:
        verdict["warning"] = (
            evaluation.get("baseline_skipped") or "no baseline model: blessed on the gate alone"
        )
        return verdict
    drop = baseline["accuracy"] - evaluation["accuracy"]
    if drop > rules.max_regression + TIE:
        verdict["reasons"].append(
            f"accuracy {evaluation['accuracy']:.3f} is {drop:.3f} below the serving "
            f"model's {baseline['accuracy']:.3f} (version {baseline.get('version')}; "
            f"allowed {rules.max_regression:g})"
        )
    # A class is judged on its F1 where both models have one: accuracy within a class is
    # its recall, and a model calling everything `circle` has circle accuracy 1.0.
    metric = (
        "per_class_f1"
        if evaluation.get("per_class_f1") and baseline.get("per_class_f1")
        else "per_class_accuracy"
    )
    verdict["class_metric"] = "F1" if metric == "per_class_f1" else "accuracy"
    examples = evaluation.get("per_class_examples", {})
    for name, score in evaluation[metric].items():
        before = baseline[metric].get(name)
        if before is None:
            continue
        change = score - before
        if abs(change) >= NOTABLE_CLASS_CHANGE:
            verdict["class_changes"][name] = round(change, 4)
        if examples.get(name, 0) < rules.min_class_examples:
            continue
        if -change > rules.max_class_regression + TIE:
            verdict["reasons"].append(
                f"class {name} {verdict['class_metric']} {score:.3f} is {-change:.3f} below "
                f"the serving model's {before:.3f} on {examples[name]} images (allowed "
                f"{rules.max_class_regression:g})"
            )
    verdict["blessed"] = not verdict["reasons"]
    return verdict


def verdict_line(verdict: dict) -> str:
    """The verdict in one line, for logs, the skipped task and the run's note."""
    if not verdict["compared"]:
        return f"blessed without a comparison: {verdict['warning']}"
    versus = (
        f"{verdict['accuracy']:.3f} vs the serving model's {verdict['baseline_accuracy']:.3f} "
        f"(version {verdict['baseline_version']})"
    )
    if verdict["blessed"]:
        return f"blessed: {versus}"
    return f"not blessed: {'; '.join(verdict['reasons'])}"

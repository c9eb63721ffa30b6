"""The publish gate on held-out accuracy. Light: the orchestrator checks it without TensorFlow."""

from __future__ import annotations


class AccuracyGateFailed(RuntimeError):
    """The model is worse than the gate: it must not be published."""


def check_gate(evaluation: dict, min_accuracy: float) -> None:
    if evaluation["accuracy"] < min_accuracy:
        raise AccuracyGateFailed(
            f"accuracy {evaluation['accuracy']:.3f} on {evaluation['num_examples']} "
            f"{evaluation['split']} images is below the gate {min_accuracy:.3f}; "
            "the model is not published"
        )

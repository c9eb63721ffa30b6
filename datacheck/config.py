"""The data-check stage's parameters, defined once (CLI flags and DAG Params come from here)."""

from __future__ import annotations

from dataclasses import dataclass

from stageconfig import param

MODES = ("off", "warn", "fail")


@dataclass(frozen=True, kw_only=True)
class DataCheckConfig:
    shards: str = param(help="The shard folder to check (a sharding job's --output)")
    baseline: str = param(
        "",
        help="What to compare with: a shard folder, or (python -m orchestration.check_data) "
        "a published model's home, <model_root>/<model_name>: the shards its LATEST "
        "version was trained on; empty: nothing to compare, only the report",
    )
    report: str = param("", help="Folder for data_check.json and data_check.png; empty: none")
    data_checks: str = param(
        "warn",
        choices=MODES,
        help="off: no checks; warn: anomalies are warnings in the log and the run's result; "
        "fail: an anomaly stops the run before training (one line each, no retry)",
        section="Data",
    )
    max_label_shift: float = param(
        0.1,
        minimum=0,
        maximum=1,
        help="Largest change of any label's share of the images (L-infinity distance of the "
        "label distributions, as TFDV measures it)",
        section="Data",
    )
    max_size_drift: float = param(
        0.1,
        minimum=0,
        maximum=1,
        help="Largest Jensen-Shannon distance (base 2, 0..1) between the image width or "
        "height histograms",
        section="Data",
    )
    max_error_share_rise: float = param(
        0.05,
        minimum=0,
        maximum=1,
        help="Largest rise of the share of inputs rejected by the sharding job",
        section="Data",
    )
    max_image_drop: float = param(
        0.2,
        minimum=0,
        maximum=1,
        help="Largest fall of the number of stored images, as a fraction of the baseline's",
        section="Data",
    )

"""The stages as tests run them, spelled once: the sharding CLI in this process, and the
DAG's run configuration."""

from __future__ import annotations

import hashlib
from pathlib import Path

# In this process (monkeypatches apply) on one thread: the cheapest local runner mode.
IN_PROCESS = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


def shard_job(input_path, output, *flags: str, in_process: bool = True) -> int:
    """`python -m beam_jobs.shard_images --input I --output O FLAGS`; its exit code."""
    from beam_jobs import shard_images

    argv = ["--input", str(input_path), "--output", str(output), *flags]
    return shard_images.run([*argv, *(IN_PROCESS if in_process else [])])


def run_conf(tmp_path, images, **overrides) -> dict:
    """A DAG run's `conf`: the roots under tmp_path, a quick recipe; overrides win."""
    return {
        "input_uri": str(images),
        "output_root": str(tmp_path / "out"),
        "model_root": str(tmp_path / "models"),
        "model_name": "shapes",
        "epochs": 2,
        "num_workers": 1,
        "accuracy_gate": 0.0,
        **overrides,
    }


def tree_digests(root, pattern: str = "*", skip: tuple[str, ...] = ()) -> dict[str, str]:
    """sha256 of every file under `root` matching `pattern` (names in `skip` left out), by
    relative path: what two runs wrote, compared byte for byte."""
    root = Path(root)
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob(pattern))
        if p.is_file() and p.name not in skip
    }

"""Shared fixtures: tiny generated image sets and free ports."""

from __future__ import annotations

import os
import socket

import pytest

# Keep TensorFlow's C++ start-up chatter out of test logs.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from beam_jobs import sample_data


@pytest.fixture(scope="session")
def sample_images(tmp_path_factory) -> str:
    """4 classes x 12 good images, read-only by convention (session-wide)."""
    root = tmp_path_factory.mktemp("sample_images")
    sample_data.generate(str(root), images_per_class=12, seed=7)
    return str(root)


@pytest.fixture(scope="session")
def sample_with_corrupt(tmp_path_factory) -> tuple[str, dict[str, str]]:
    """4 classes x 12 good images plus one corrupt file of each kind.

    Returns (root, {corrupt path: expected reason})."""
    root = tmp_path_factory.mktemp("sample_with_corrupt")
    sample_data.generate(str(root), images_per_class=12, seed=11)
    corrupt = sample_data.write_corrupt_files(str(root), seed=11)
    return str(root), corrupt


@pytest.fixture
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def trainable_shards(tmp_path_factory) -> str:
    """Shards of 4 classes x 120 images: enough for a model to learn in a few epochs."""
    from beam_jobs import shard_images

    root = tmp_path_factory.mktemp("trainable")
    images, shards = root / "images", root / "shards"
    sample_data.generate(str(images), images_per_class=120, seed=3)
    code = shard_images.run(
        [
            "--input",
            str(images),
            "--output",
            str(shards),
            "--splits",
            "train=0.75,validation=0.125,test=0.125",
            "--min-shards",
            "2",
            "--direct_running_mode=in_memory",
            "--direct_num_workers=1",
        ]
    )
    assert code == 0
    return str(shards)

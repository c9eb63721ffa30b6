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

"""Property: file and label names from all of Unicode plus glob characters go through the
sharding job; each input is stored once or dead-lettered once, and the shards read back
with plain TensorFlow."""

import json
import random

import pytest
import tensorflow as tf
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from beam_jobs import sample_data
from beam_jobs.plan import label_name
from tests.jobs import shard_job
from training import features

pytestmark = pytest.mark.slow  # a sharding job per example

GLOB = "[]*?{}!"


def _name_ok(name: str) -> bool:
    """What a Linux filesystem can hold and the job does not treat as hidden."""
    return (
        name not in (".", "..")
        and not name.startswith((".", "_"))
        and len(name.encode("utf-8", "surrogatepass")) <= 200
    )


names = st.text(
    alphabet=st.one_of(
        st.sampled_from(GLOB),
        st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"),
    ),
    min_size=1,
    max_size=12,
).filter(_name_ok)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    files=st.lists(
        st.tuples(names, names, st.booleans()),
        min_size=1,
        max_size=6,
        unique_by=lambda t: (t[0], t[1]),
    )
)
@example(files=[("\ufa2a", "0", True), ("cafe\u0301", "x", True)])  # NFC changes both
def test_every_name_is_stored_once_or_dead_lettered_once(tmp_path_factory, files):
    root = tmp_path_factory.mktemp("names")
    images = root / "in"
    expected = set()
    for i, (label, name, good) in enumerate(files):
        path = images / label / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if good:
            sample_data.draw_sample("circle", random.Random(i), 24, 24).save(path, format="PNG")
        else:
            path.write_bytes(b"not an image")
        expected.add(f"{label}/{name}")
    output = root / "out"
    # Often one label folder: allowed, these examples are about the names.
    code = shard_job(str(images), str(output), "--max-error-fraction", "1", "--allow-one-class")
    assert code == (0 if any(ok for *_, ok in files) else 1)  # nothing stored: a failure
    stored = []
    for shard in sorted(output.glob("*-of-*.tfrecord")):
        for raw in tf.data.TFRecordDataset(str(shard)):
            example = features.parse_example(raw)
            stored.append(example[features.IMAGE_ID].numpy().decode())
            label = example[features.LABEL_TEXT].numpy().decode()
            # The id keeps the folder's name as it is on disk; the label is that name as
            # Unicode text (NFC: U+FA2A, a compatibility ideograph, is U+98EF).
            assert label_name(stored[-1].split("/", 1)[0]) == label
    letters = []
    for path in sorted((output / "errors").glob("*.jsonl")):
        letters += [json.loads(line)["key"] for line in path.read_bytes().split(b"\n") if line]
    assert sorted(stored + letters) == sorted(expected)
    assert len(set(stored)) == len(stored) and not set(stored) & set(letters)
    good = {f"{label}/{name}" for label, name, ok in files if ok}
    assert set(stored) == good

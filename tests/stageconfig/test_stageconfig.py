import argparse
from dataclasses import dataclass

import pytest

import stageconfig
from stageconfig import ConfigError, param


@dataclass(frozen=True)
class Example:
    path: str = param(help="Where")
    count: int = param(3, minimum=1, maximum=10, help="How many", section="S")
    rate: float = param(0.5, minimum=0, exclusive_minimum=True, maximum=1, help="How fast")
    mode: str = param("a", choices=("a", "b"), help="Which")
    limit: int | None = param(None, minimum=1, help="Optional cap")
    loud: bool = param(False, help="Talk more")
    tidy: bool = param(True, help="Clean up")

    def __post_init__(self):
        stageconfig.check(self)


def parse(argv):
    parser = argparse.ArgumentParser()
    stageconfig.add_arguments(parser, Example)
    return stageconfig.from_args(Example, parser.parse_args(argv))


def test_flags_defaults_and_bools_come_from_the_fields():
    assert parse(["--path", "p"]) == Example(path="p")
    config = parse(["--path", "p", "--count", "4", "--loud", "--no-tidy", "--limit", "2"])
    assert (config.count, config.loud, config.tidy, config.limit) == (4, True, False, 2)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("count", 0, r"--count must be in \[1, 10\], got 0"),
        ("count", 11, r"--count must be in \[1, 10\], got 11"),
        ("rate", 0.0, r"--rate must be in \(0, 1\], got 0.0"),
        ("mode", "c", "--mode must be one of a, b"),
        ("limit", 0, "--limit must be >= 1, got 0"),
        ("count", 2.5, "--count must be a number"),
        ("count", True, "--count must be a number"),
    ],
)
def test_values_outside_the_definition_are_one_line_errors(field, value, message):
    with pytest.raises(ConfigError, match=message):
        Example(path="p", **{field: value})


def test_the_dag_param_carries_the_same_type_bounds_and_words():
    fields = stageconfig.dag_param_fields(Example, "count")
    assert fields["default"] == 3 and fields["type"] == "integer"
    assert (fields["minimum"], fields["maximum"], fields["section"]) == (1, 10, "S")
    assert "Range in [1, 10]" in fields["description"]
    rate = stageconfig.dag_param_fields(Example, "rate")
    assert rate["exclusiveMinimum"] == 0 and "minimum" not in rate
    assert stageconfig.dag_param_fields(Example, "limit")["type"] == ["integer", "null"]
    assert stageconfig.dag_param_fields(Example, "mode")["enum"] == ["a", "b"]


def test_an_output_folder_at_or_inside_a_file_is_a_one_line_error(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(ConfigError, match=r"--output .* is a file"):
        stageconfig.check_output_folder("--output", str(a_file))
    with pytest.raises(ConfigError, match=r"is inside a file \("):
        stageconfig.check_output_folder("--output", str(a_file / "deeper" / "run"))
    stageconfig.check_output_folder("--output", str(tmp_path / "new" / "run"))  # creatable
    stageconfig.check_output_folder("--output", "gs://bucket/run")  # not checked here


def test_a_file_uri_is_the_local_path_it_names():
    assert stageconfig.local_path("file:///data/a%20b.jpg") == "/data/a b.jpg"
    assert stageconfig.local_path("FILE://localhost/data/x") == "/data/x"
    assert stageconfig.local_path("file:///") == "/"
    for unchanged in ("/data/x", "gs://b/x", "relative/x", "file_named_file:x"):
        assert stageconfig.local_path(unchanged) == unchanged
    with pytest.raises(ConfigError, match="another host"):
        stageconfig.local_path("file://nas/data/x")


def test_a_leading_tilde_is_the_home_folder_in_every_stages_path_flags(tmp_path, monkeypatch):
    """A trigger form or a config file passes `~/photos` verbatim (no shell expands it)."""
    from beam_jobs.config import ShardConfig
    from training.config import TrainConfig

    monkeypatch.setenv("HOME", str(tmp_path))
    assert stageconfig.user_path("~/photos") == f"{tmp_path}/photos"
    assert stageconfig.user_path("~") == str(tmp_path)
    assert stageconfig.user_path("file:///data/a%20b") == "/data/a b"
    for unchanged in ("/data/~x", "gs://b/~/x", "relative/~"):
        assert stageconfig.user_path(unchanged) == unchanged
    shard = ShardConfig(input="~/photos", output="~/shards", cache_dir="~/cache")
    assert (shard.input, shard.output, shard.cache_dir) == (
        f"{tmp_path}/photos",
        f"{tmp_path}/shards",
        f"{tmp_path}/cache",
    )
    train = TrainConfig(data="~/shards", output="~/run")
    assert (train.data, train.output) == (f"{tmp_path}/shards", f"{tmp_path}/run")


@dataclass(frozen=True)
class Inner:
    size: int = param(8, minimum=1, maximum=64, help="Size", tags=("keep",))
    crop: bool = param(True, help="Crop")

    def __post_init__(self):
        stageconfig.check(self)


@dataclass(frozen=True)
class Outer:
    path: str = param(help="Where")
    inner: Inner = stageconfig.group(Inner)
    seed: int = param(0, minimum=0, help="Seed", tags=("keep",))

    def __post_init__(self):
        stageconfig.check(self)


def test_a_grouped_config_is_flat_to_its_user_and_nested_in_the_code():
    parser = argparse.ArgumentParser()
    stageconfig.add_arguments(parser, Outer)
    config = stageconfig.from_args(Outer, parser.parse_args(["--path", "p", "--size", "16"]))
    assert config == Outer(path="p", inner=Inner(size=16))
    assert stageconfig.flat(config) == {"path": "p", "size": 16, "crop": True, "seed": 0}
    assert stageconfig.from_mapping(Outer, stageconfig.flat(config), name="o") == config
    assert stageconfig.tagged(Outer, "keep") == ("size", "seed")
    assert stageconfig.dag_param_fields(Outer, "size")["maximum"] == 64
    with pytest.raises(ConfigError, match=r"^o.size must be in \[1, 64\], got 0$"):
        stageconfig.from_mapping(Outer, {"path": "p", "size": 0}, name="o")
    with pytest.raises(ConfigError, match=r"\['sizes'\] are not settings here"):
        stageconfig.from_mapping(Outer, {"path": "p", "sizes": 1}, name="o")


def test_a_group_cannot_hide_a_parameter_of_the_same_name():
    @dataclass(frozen=True)
    class Clash:
        size: int = param(1, help="Outer size")
        inner: Inner = stageconfig.group(Inner)

    with pytest.raises(TypeError, match="repeats a parameter name"):
        stageconfig.add_arguments(argparse.ArgumentParser(), Clash)

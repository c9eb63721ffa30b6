"""One definition per stage parameter: type, default, bounds, help, and from it
the CLI flag and the DAG Param.

A stage's config is a frozen dataclass whose fields are made with `param()`.
`check()` enforces the bounds (call it from `__post_init__`), `add_arguments()`
and `from_args()` build and read the stage's argparse flags, and
`dag_param_fields()` returns the keyword arguments of an Airflow `Param` (JSON
schema) for a field, so the CLI, the config and the trigger form cannot
disagree. `from_mapping()` builds a config from a JSON object (a DAG Param such as
`training_options`) with the same checks, and `tagged()` lists the fields a stage
marked (the trainer's resume keys). A field made with `group(Cls)` holds a nested
config whose fields are flags and Params of the outer one under their own names
(the trainer's `DataConfig`): one flat surface for the user, one object per concern
in the code; `flat()` is the config as that flat mapping. `exit_codes.py` says what
each stage's exit code means. Imports only the standard library: DAG files import it at parse time.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import types
import typing
import urllib.parse
from collections.abc import Callable
from dataclasses import MISSING, dataclass
from typing import Any

__all__ = [
    "ConfigError",
    "add_arguments",
    "check",
    "check_output_folder",
    "check_utf8_name",
    "dag_param_fields",
    "flat",
    "from_args",
    "from_mapping",
    "group",
    "local_path",
    "param",
    "tagged",
    "text_name",
    "user_path",
]


class ConfigError(ValueError):
    """A user mistake in a stage's parameters; reported as one line, exit code 2."""


@dataclass(frozen=True)
class Spec:
    help: str
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False  # (minimum, ...] instead of [minimum, ...]
    choices: tuple | None = None
    flag: str | None = None  # CLI name without dashes when it differs from the field's
    parse: Callable[[str], Any] | None = None  # CLI text -> value (for non-scalar fields)
    section: str = ""  # where the trigger form shows it
    tags: tuple[str, ...] = ()  # what a stage says of the field ("resume": see training)
    pattern: str | None = None  # a text field's regular expression (anchored: ^...$)


def param(
    default: Any = MISSING,
    *,
    help: str,
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive_minimum: bool = False,
    choices: tuple | None = None,
    flag: str | None = None,
    parse: Callable[[str], Any] | None = None,
    section: str = "",
    default_factory: Callable[[], Any] | None = None,
    tags: tuple[str, ...] = (),
    pattern: str | None = None,
) -> Any:
    """A dataclass field carrying its `Spec`. No default means a required flag (and, for
    text, a non-empty one)."""
    spec = Spec(
        help, minimum, maximum, exclusive_minimum, choices, flag, parse, section, tags, pattern
    )
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata={"spec": spec})
    return dataclasses.field(default=default, metadata={"spec": spec})


def group(cls) -> Any:
    """A field holding a nested config `cls` (all its fields have defaults)."""
    return dataclasses.field(default_factory=cls, metadata={"group": cls})


def _own_fields(cls) -> list[tuple[dataclasses.Field, Spec, type]]:
    hints = typing.get_type_hints(cls)
    return [
        (f, f.metadata["spec"], hints[f.name])
        for f in dataclasses.fields(cls)
        if "spec" in f.metadata
    ]


def _fields(cls) -> list[tuple[dataclasses.Field, Spec, type]]:
    """Every parameter of `cls`, those of its groups included, in declaration order."""
    found: list[tuple[dataclasses.Field, Spec, type]] = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if "group" in f.metadata:
            found += _fields(f.metadata["group"])
        elif "spec" in f.metadata:
            found.append((f, f.metadata["spec"], hints[f.name]))
    names = [f.name for f, _, _ in found]
    if len(set(names)) != len(names):
        raise TypeError(f"{cls.__name__}: a group repeats a parameter name: {names}")
    return found


def _build(cls, values: dict[str, Any]):
    """`cls` from flat parameter values: each group's own from its names."""
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if "group" in f.metadata:
            kwargs[f.name] = _build(f.metadata["group"], values)
        elif f.name in values:
            kwargs[f.name] = values[f.name]
    return cls(**kwargs)


def flat(config) -> dict[str, Any]:
    """The config as {parameter: value}, groups flattened: what its flags, its Params and
    a run's recorded config.json spell."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if "group" in f.metadata:
            values.update(flat(value))
        else:
            values[f.name] = value
    return values


def tagged(cls, tag: str) -> tuple[str, ...]:
    """The names of `cls`'s fields carrying `tag`, in declaration order."""
    return tuple(field.name for field, spec, _ in _fields(cls) if tag in spec.tags)


def flag_name(field: dataclasses.Field) -> str:
    spec: Spec = field.metadata["spec"]
    return "--" + (spec.flag or field.name).replace("_", "-")


def _scalar(annotation) -> tuple[type, bool]:
    """(scalar type, optional) of `int`, `int | None`, `dict[str, float]`..."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0], True
    return typing.get_origin(annotation) or annotation, False


def check(config, *, prefix: str = "") -> None:
    """Raise ConfigError naming the flag (or `prefix.field`, for a config given as a
    mapping) for the first value outside its bounds."""
    for field in dataclasses.fields(config):
        if "group" in field.metadata:
            check(getattr(config, field.name), prefix=prefix)
    for field, spec, annotation in _own_fields(type(config)):
        flag = f"{prefix}.{field.name}" if prefix else flag_name(field)
        _check_value(flag, getattr(config, field.name), spec, annotation)


def _check_value(flag: str, value: Any, spec: Spec, annotation) -> None:
    kind, optional = _scalar(annotation)
    if value is None:
        if optional:
            return
        raise ConfigError(f"{flag} is required")
    if kind is str and not isinstance(value, str):
        raise ConfigError(f"{flag} must be text, got {value!r}")
    if kind is bool and not isinstance(value, bool):
        raise ConfigError(f"{flag} must be true or false, got {value!r}")
    if kind is dict and not isinstance(value, dict):
        raise ConfigError(f"{flag} must be a JSON object, got {value!r}")
    if kind in (int, float) and (isinstance(value, bool) or not isinstance(value, kind | int)):
        raise ConfigError(f"{flag} must be a number, got {value!r}")
    if spec.choices is not None and value not in spec.choices:
        raise ConfigError(f"{flag} must be one of {', '.join(map(str, spec.choices))}")
    if spec.pattern is not None and not re.fullmatch(spec.pattern, value):
        raise ConfigError(f"{flag} {value!r} does not match {spec.pattern}")
    low, high = spec.minimum, spec.maximum
    if low is not None and (value <= low if spec.exclusive_minimum else value < low):
        raise ConfigError(f"{flag} must be {_range(spec)}, got {value}")
    if high is not None and value > high:
        raise ConfigError(f"{flag} must be {_range(spec)}, got {value}")


def from_mapping(cls, values: Any, *, name: str):
    """A config from a mapping (a DAG Param holding a JSON object): unknown keys, values
    of the wrong type and values out of bounds are each a one-line ConfigError naming
    `name.key` (`key` when `name` is empty: the DAG's own Params), never a value that
    travels on ("two" GPUs reaching a manifest)."""
    if not isinstance(values, dict):
        raise ConfigError(f"{name} must be a JSON object, got {values!r}")
    fields = {field.name: (spec, annotation) for field, spec, annotation in _fields(cls)}
    if unknown := sorted(set(values) - set(fields)):
        allowed = ", ".join(sorted(fields)) or "none"
        raise ConfigError(f"{name} {unknown} are not settings here (allowed: {allowed})")
    for key, value in values.items():  # before the config's own checks, which name flags
        _check_value(f"{name}.{key}" if name else key, value, *fields[key])
    if missing := sorted(
        f.name for f, _, _ in _fields(cls)
        if f.name not in values and f.default is MISSING and f.default_factory is MISSING
    ):  # fmt: skip
        raise ConfigError(f"{name} needs {missing}")
    config = _build(cls, values)
    check(config, prefix=name)
    return config


def is_remote(path: str) -> bool:
    """A path with a scheme (gs://, s3://, ...), read through a file system layer."""
    return "://" in path


def local_path(uri: str) -> str:
    """A `file://` URI as the local path it names; anything else unchanged.

    Users and tools write local files as `file:///data/x.jpg` (RFC 8089,
    percent-encoded); TensorFlow reads that, Beam's file systems do not.
    """
    if not uri.lower().startswith("file://"):
        return uri
    parsed = urllib.parse.urlsplit(uri)
    if parsed.netloc not in ("", "localhost"):
        raise ConfigError(f"{uri}: a file:// URI of another host ({parsed.netloc}) is not local")
    return urllib.parse.unquote(parsed.path, errors="surrogateescape") or "/"


def user_path(value: str) -> str:
    """A path flag as typed where no shell expands it (a DAG's trigger form, a config
    file, a scheduler's argument list): a `file://` URI as the local path it names, and
    a leading `~` as the home folder, as a shell would have done."""
    path = local_path(value)
    return os.path.expanduser(path) if path.startswith("~") else path


def text_name(name: str) -> str:
    """A local file name as valid text: the same string when it is, else its undecodable
    bytes as `\\xNN`.

    Linux file names are bytes; Python holds the ones that are not UTF-8 (a Latin-1
    archive unpacked on Linux, say) as lone surrogates (PEP 383), which open() takes
    back but no UTF-8 encoder, JSON file or TFRecord feature does. The path used to
    read the file stays as it was; its key, label, every line written about it and
    every message naming it use this form.
    """
    if name.isascii():  # the usual case, and a per-file cost while planning: no surrogates
        return name
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def check_utf8_name(flag: str, path: str) -> None:
    """Refuse a local name of bytes that are not UTF-8 (held by Python as PEP 383
    surrogates): Beam's pipeline graph and TensorFlow's file API take paths as UTF-8
    text, and fail deep inside with a traceback."""
    shown = text_name(path)
    if shown != path:
        raise ConfigError(
            f"{flag} {shown}: the name is not UTF-8, and Beam's and TensorFlow's paths are "
            "UTF-8 text: give a folder with a UTF-8 name"
        )


def check_output_folder(flag: str, path: str) -> None:
    """A local output folder must be creatable: no existing file at the path or above it.
    (Found late, it is a traceback from deep inside TensorFlow or Beam.)"""
    if not path or "://" in path:
        return
    check_utf8_name(flag, path)
    current = os.path.abspath(path)
    while True:
        if os.path.exists(current):
            if not os.path.isdir(current):
                what = (
                    "is a file"
                    if current == os.path.abspath(path)
                    else f"is inside a file ({current})"
                )
                raise ConfigError(f"{flag} {path} {what}: give a folder")
            return
        parent = os.path.dirname(current)
        if parent == current:
            return
        current = parent


def is_inside(path: str, root: str) -> bool:
    """`path` is `root` or under it: by real path locally (symlinks followed), by name
    on an object store; a local path is never inside a remote root or the reverse."""
    if ("://" in path) != ("://" in root):
        return False
    if "://" in root:
        return (path.rstrip("/") + "/").startswith(root.rstrip("/") + "/")
    real_root, real_path = os.path.realpath(root), os.path.realpath(path)
    return os.path.commonpath([real_root, real_path]) == real_root


def _number(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def _range(spec: Spec) -> str:
    low, high = spec.minimum, spec.maximum
    if low is not None and high is not None:
        opening = "(" if spec.exclusive_minimum else "["
        return f"in {opening}{_number(low)}, {_number(high)}]"
    if low is not None:
        return f"{'>' if spec.exclusive_minimum else '>='} {_number(low)}"
    return f"<= {_number(high)}"


def _describe(field: dataclasses.Field, spec: Spec) -> str:
    """The help text plus the default and range, the same words on the CLI and the form."""
    parts = [spec.help.rstrip(".") + "."]
    bounds = _range(spec) if spec.minimum is not None or spec.maximum is not None else ""
    default = field.default if field.default is not MISSING else None
    if bounds:
        parts.append(f"Range {bounds}.")
    if default not in (None, MISSING, "") and not isinstance(default, bool):
        parts.append(f"Default {default}.")
    return " ".join(parts)


def add_arguments(parser: argparse.ArgumentParser, cls) -> None:
    """One flag per field: `--field-name` (`--no-field` for a bool that defaults to True)."""
    for field, spec, annotation in _fields(cls):
        kind, _ = _scalar(annotation)
        help_text = _describe(field, spec).replace("%", "%%")
        if kind is bool:
            if field.default:
                parser.add_argument(
                    f"--no-{(spec.flag or field.name).replace('_', '-')}",
                    dest=field.name,
                    action="store_false",
                    help=help_text,
                )
            else:
                parser.add_argument(
                    flag_name(field), dest=field.name, action="store_true", help=help_text
                )
            continue
        options: dict[str, Any] = {
            "dest": field.name,
            "help": help_text,
            "metavar": (spec.flag or field.name).upper(),
        }
        if spec.parse is not None:
            options["type"] = _argparse_type(spec.parse)
        elif kind in (int, float, str):
            options["type"] = kind
        if spec.choices is not None:
            options["choices"] = spec.choices
        if field.default is MISSING and field.default_factory is MISSING:
            options["required"] = True
        elif field.default is not MISSING:
            options["default"] = field.default
        else:
            options["default"] = field.default_factory()
        parser.add_argument(flag_name(field), **options)


def _argparse_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """argparse shows an ArgumentTypeError's own message, not "invalid value"."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ConfigError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return convert


def from_args(cls, args: argparse.Namespace, **overrides):
    """The config from parsed flags (plus fields the CLI does not own, as overrides)."""
    values = {f.name: getattr(args, f.name) for f, _, _ in _fields(cls) if hasattr(args, f.name)}
    return _build(cls, {**values, **overrides})


_JSON_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean", dict: "object"}


def dag_param_fields(cls, name: str, *, default: Any = MISSING) -> dict:
    """`Param(**fields)` for one config field: JSON-schema type, bounds, enum, text."""
    field, spec, annotation = next(x for x in _fields(cls) if x[0].name == name)
    kind, optional = _scalar(annotation)
    json_type = _JSON_TYPES[kind]
    if default is MISSING and field.default is not MISSING:
        default = field.default
    elif default is MISSING and field.default_factory is not MISSING:
        default = field.default_factory()
    elif default is MISSING:
        raise ValueError(f"{cls.__name__}.{name} has no default: pass the Param's default")
    # Airflow's trigger form requires a value in every field whose type excludes null and
    # treats an empty text box as no value: a string that may be empty ("off") must be
    # nullable, or the form refuses its own default and its Trigger button stays disabled.
    nullable = optional or (kind is str and default == "")
    schema: dict[str, Any] = {
        "default": default,
        "type": [json_type, "null"] if nullable else json_type,
        "title": name.replace("_", " ").capitalize(),
        "description": _describe(field, spec),
    }
    if spec.section:
        schema["section"] = spec.section
    if spec.choices is not None:
        schema["enum"] = list(spec.choices)
    if spec.minimum is not None:
        schema["exclusiveMinimum" if spec.exclusive_minimum else "minimum"] = spec.minimum
    if spec.maximum is not None:
        schema["maximum"] = spec.maximum
    if spec.pattern is not None:
        schema["pattern"] = spec.pattern
    if kind is str and field.default is MISSING and field.default_factory is MISSING:
        schema["minLength"] = 1  # required: the form refuses an empty box
    return schema

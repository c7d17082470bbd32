"""Options declared as frozen, typed dataclasses, parsed from `key=value` text: the one
machinery of env options (`EnvOptions`, on each env's `EnvInfo.options`) and of credit
options (credit/options.py builds on it).

Each field is one option, declared once with its type, default and one line of help
(`field(default=..., metadata=doc("..."))`); the dataclass's `__post_init__` checks the
values' ranges. From that one declaration:

- `parse_options(Options, pairs)`: `(key, value)` texts -> an instance, each value parsed
  by its field's type (`parse_value`); an unknown key, a key given twice or a refused
  value is one ValueError;
- `changed_options(options)`: the options off their defaults, in declaration order, each
  value in one spelling (`format_value`): what a run's identity is built from, so
  `x=true`, `x=True` and `x=1` are one run and an option spelled out at its default is
  the run without it.

Field types understood: bool, int, float, str, a `Literal` of strings, `X | None`
(spelled `none`) and `tuple[float, float]` (spelled `low,high`).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal, Self

TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")
HELP_KEY = "help"


def doc(text: str) -> dict[str, str]:
    """A field's metadata holding its one line of help: `field(default=..., metadata=doc(...))`
    declares one option (its type is the field's annotation)."""
    return {HELP_KEY: text}


def doc_of(options_class: type, name: str) -> Mapping[str, Any]:
    """The metadata (the help) of field `name` of `options_class`: for a subclass that
    redeclares the field with another default (`credit.hcapo.HCAPOSeedOptions`)."""
    (spec,) = (spec for spec in dataclasses.fields(options_class) if spec.name == name)
    return spec.metadata


def check_choices(options: Any) -> None:
    """ValueError naming the first field typed `Literal[...]` whose value is not one of its
    choices (for options built in Python, which no parser has checked)."""
    for name, annotation in field_types(type(options)).items():
        choices = typing.get_args(annotation)
        value = getattr(options, name)
        if typing.get_origin(annotation) is Literal and value not in choices:
            raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")


def parse_bool(text: str) -> bool:
    """`true` / `false` (also 1 / 0, yes / no, on / off, any case)."""
    lowered = text.strip().lower()
    if lowered in TRUE_WORDS:
        return True
    if lowered in FALSE_WORDS:
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def parse_float(text: str) -> float:
    """A float (`inf` allowed, NaN refused)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a number, got {text!r}") from None
    if math.isnan(value):
        raise ValueError("expected a number, got nan")
    return value


def parse_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"expected an integer, got {text!r}") from None


def parse_value(annotation: Any, text: str) -> Any:
    """The value of `text` for a field annotated `annotation` (module docstring's types).

    Raises:
        ValueError: a text the type refuses, or a type this module does not parse.
    """
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        if text not in args:
            raise ValueError(f"expected one of {', '.join(args)}, got {text!r}")
        return text
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        (other,) = (arg for arg in args if arg is not type(None))
        return None if text.strip().lower() == "none" else parse_value(other, text)
    if origin is tuple and args == (float, float):
        parts = text.split(",")
        if len(parts) != 2:
            raise ValueError(f"expected low,high, got {text!r}")
        return parse_float(parts[0]), parse_float(parts[1])
    parsers = {bool: parse_bool, int: parse_int, float: parse_float, str: str}
    if annotation not in parsers:
        raise ValueError(f"an option of type {annotation!r} cannot be given as text")
    return parsers[annotation](text)


def format_value(value: Any) -> str:
    """The one spelling of a parsed value in a run's identity (`parse_value` reads it back).

    bool `true` / `false`; float the shortest text that reads back to it, without a
    trailing `.0` (`1`, `0.95`, `1e-06`, `inf`); None `none`; a pair `low,high`.
    """
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = repr(value)
        return text[:-2] if text.endswith(".0") else text
    if isinstance(value, tuple):
        return ",".join(format_value(item) for item in value)
    return str(value)


def field_types(options_class: type) -> dict[str, Any]:
    """Field name -> its resolved annotation, for the fields of an options dataclass."""
    hints = typing.get_type_hints(options_class)
    return {spec.name: hints[spec.name] for spec in dataclasses.fields(options_class)}


def split_option(text: str, what: str = "an option") -> tuple[str, str]:
    """`key=value` -> (key, value); ValueError (`{what} is key=value, ...`) for anything else."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"{what} is key=value, got {text!r}")
    return key.strip(), value.strip()


def parse_options(options_class: type, pairs: Sequence[tuple[str, str]]) -> Any:
    """An instance of `options_class` from `(key, value)` texts; unnamed fields keep defaults.

    Raises:
        ValueError: a key the class does not declare (the valid ones listed), a key given
            twice, a value its field's type refuses, or a combination `__post_init__`
            refuses.
    """
    declared = field_types(options_class)
    parsed: dict[str, Any] = {}
    for key, text in pairs:
        if key not in declared:
            raise ValueError(f"no option {key!r}; valid: {', '.join(declared) or 'none'}")
        if key in parsed:
            raise ValueError(f"option {key!r} given twice")
        try:
            parsed[key] = parse_value(declared[key], text)
        except ValueError as error:
            raise ValueError(f"{key}={text}: {error}") from None
    return options_class(**parsed)


def changed_options(options: Any) -> tuple[tuple[str, str], ...]:
    """`(key, value text)` of every option off its default, in declaration order."""
    return tuple(
        (spec.name, format_value(getattr(options, spec.name)))
        for spec in dataclasses.fields(options)
        if getattr(options, spec.name) != spec.default
    )


def describe_type(annotation: Any) -> str:
    """How a field's value is written, for `--help` (`true|false`, `group|batch|none`)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return "|".join(args)
    if origin in (typing.Union, types.UnionType):
        (other,) = (arg for arg in args if arg is not type(None))
        return f"{describe_type(other)}|none"
    if origin is tuple:
        return "low,high"
    return {bool: "true|false", int: "int", float: "float", str: "text"}[annotation]


def help_lines(options_class: type, indent: str = "  ") -> list[str]:
    """Each option of `options_class` as `key=default (how it is written): help`."""
    types_ = field_types(options_class)
    return [
        f"{indent}{spec.name}={format_value(spec.default)} "
        f"({describe_type(types_[spec.name])}): {spec.metadata[HELP_KEY]}"
        for spec in dataclasses.fields(options_class)
    ]


def check_types(options: Any) -> None:
    """ValueError naming the first field whose value is not of its declared type (for
    options built in Python, e.g. `gym.make(id, delay="4")`, which no parser has read):
    a bool is no int or float, an int is a float."""
    for name, annotation in field_types(type(options)).items():
        value = getattr(options, name)
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
        if origin in (typing.Union, types.UnionType) and type(None) in args:
            if value is None:
                continue
            (annotation,) = (arg for arg in args if arg is not type(None))
            origin = typing.get_origin(annotation)
        if origin is Literal:
            check_choices(options)
            continue
        if annotation is bool:
            fits = isinstance(value, bool)
            expected = "true or false"
        elif annotation is int:
            fits = isinstance(value, int) and not isinstance(value, bool)
            expected = "an integer"
        elif annotation is float:
            fits = isinstance(value, int | float) and not isinstance(value, bool)
            fits = fits and not math.isnan(value)
            expected = "a number"
        else:
            fits = isinstance(value, annotation)
            expected = describe_type(annotation)
        if not fits:
            raise ValueError(f"{name} must be {expected}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class EnvOptions:
    """Base of an env's options class (`EnvInfo.options`): the constructor keywords a run
    may set with `--env-options key=value ...`, each a field with its type, default and
    help, the ranges checked in `__post_init__` (call `super().__post_init__()` first: it
    checks every value's type).

    The step limit is not among them (`--max-episode-steps`), nor what a run sets by other
    means (an evaluation split's kwargs, `EnvInfo.task_families`).
    """

    OPTION_WORD: ClassVar[str] = "an env option"

    def __post_init__(self) -> None:
        check_types(self)

    @classmethod
    def parse(cls, texts: str | Sequence[str]) -> Self:
        """The options from `key=value` texts (one string is split on whitespace):
        `"delay=16 variance=high"` or `("delay=16", "variance=high")`.

        Raises:
            ValueError: one line: a text without `=`, a key the env does not declare (the
                valid ones listed), a key given twice, or a value its type or range refuses.
        """
        items = texts.split() if isinstance(texts, str) else list(texts)
        pairs = [split_option(text, cls.OPTION_WORD) for text in items]
        return parse_options(cls, pairs)

    def canonical(self) -> tuple[str, ...]:
        """`key=value` of every option off its default, in declaration order, each value in
        one spelling: what a run's identity and name are built from, so `delay=16
        variance=high`, `variance=high delay=16` and `delay=16 variance=high num_keys=1`
        are one run."""
        return tuple(f"{key}={value}" for key, value in changed_options(self))

    def kwargs(self) -> dict[str, Any]:
        """The env constructor keywords: every option off its default."""
        return {
            spec.name: getattr(self, spec.name)
            for spec in dataclasses.fields(self)
            if getattr(self, spec.name) != spec.default
        }

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The options' names, in declaration order."""
        return tuple(spec.name for spec in dataclasses.fields(cls))

    @classmethod
    def help(cls) -> str:
        """Every option as `key=default (how it is written): help`, one a line."""
        return "\n".join(help_lines(cls)) or "  (none)"


@dataclasses.dataclass(frozen=True)
class NoEnvOptions(EnvOptions):
    """The options of an env that a run cannot set from the command line."""

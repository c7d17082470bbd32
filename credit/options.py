"""Credit-module options: one frozen, typed dataclass per module that every consumer reads.

A credit module class names its options' dataclass `Options` (`credit.base.CreditModule`);
each field is one option, declared once with its type, default and one line of help
(`field(default=..., metadata=doc("..."))`), and the dataclass's `__post_init__` checks
the values' ranges. From that one declaration:

- `parse_options(Options, pairs)`: the command line's `key=value` texts
  (`--credit-options`) -> an instance, each value parsed by its field's type (`parse_value`);
  an unknown key, a key given twice or a refused value is one ValueError;
- `canonical_texts(options)`: the run's identity (benchmarks/run_identity.py's run name, config.json
  and the leaderboard row): `key=value` of the options off their defaults, sorted by key,
  each value in one spelling (`format_value`). So `causal_contrast=true`, `=True` and `=1`
  are one run, and an option spelled out at its default is the run without it;
- `options_help(modules)`: the `--help` text of `--credit-options`, every option of every
  module once;
- the verl estimators (integrations/verl_credit.py, integrations/verl_hindsight.py) take
  the same instances.

Field types understood: bool, int, float, str, a `Literal` of strings, `float | None`
(spelled `none`) and `tuple[float, float]` (spelled `low,high`).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal

TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")
HELP_KEY = "help"


def doc(text: str) -> dict[str, str]:
    """A field's metadata holding its one line of help: `field(default=..., metadata=doc(...))`
    declares one credit option (its type is the field's annotation)."""
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


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """The options of a module that has none."""


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


def split_option(text: str) -> tuple[str, str]:
    """`key=value` -> (key, value); ValueError for anything else."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"a credit option is key=value, got {text!r}")
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


def canonical_texts(options: Any) -> tuple[str, ...]:
    """`key=value` of every option off its default, sorted by key (the run identity)."""
    changed = [
        (spec.name, getattr(options, spec.name))
        for spec in dataclasses.fields(options)
        if getattr(options, spec.name) != spec.default
    ]
    return tuple(f"{key}={format_value(value)}" for key, value in sorted(changed))


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


def options_help(modules: Mapping[str, type]) -> str:
    """The help of `--credit-options`: per module name, each option as
    `key=default (how it is written): help`, every option of every module once."""
    lines = [
        "Options of the --credit module as key=value, e.g. `--credit-options clip=1,1 "
        "gamma=1` (hcapo). Options not named keep their defaults; named ones enter the "
        "run's identity, parsed (`true`, `True` and `1` are one run; a default spelled out "
        "is the run without it). Per module:"
    ]
    none = []
    for name, cls in modules.items():
        specs = dataclasses.fields(cls.Options)
        if not specs:
            none.append(name)
            continue
        types_ = field_types(cls.Options)
        lines.append(f"{name}:")
        lines.extend(
            f"  {spec.name}={format_value(spec.default)} ({describe_type(types_[spec.name])}): "
            f"{spec.metadata[HELP_KEY]}"
            for spec in specs
        )
    if none:
        lines.append(f"{', '.join(none)}: no options.")
    return "\n".join(lines)

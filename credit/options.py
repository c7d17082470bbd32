"""Named module options from the command line: `--credit-option key=value` -> constructor kwargs.

A credit module class lists the options a user may set in `options` (name -> parser of
the value's text); `parse_options` turns the `(key, value)` text pairs a run carries
(`credit.base.CreditContext.options`) into keyword arguments of its constructor, or
raises one ValueError naming the valid keys or the expected form. Options not named keep
the constructor's defaults.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

OptionParser = Callable[[str], Any]
TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")


def parse_bool(text: str) -> bool:
    """`true` / `false` (also 1 / 0, yes / no, on / off)."""
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


def parse_pair(text: str) -> tuple[float, float]:
    """`low,high` -> (low, high), e.g. `0.8,1.2` or `0,inf`."""
    parts = text.split(",")
    if len(parts) != 2:
        raise ValueError(f"expected low,high, got {text!r}")
    return parse_float(parts[0]), parse_float(parts[1])


def choice(*values: str) -> OptionParser:
    """A parser accepting exactly one of `values`."""

    def parse(text: str) -> str:
        if text not in values:
            raise ValueError(f"expected one of {', '.join(values)}, got {text!r}")
        return text

    return parse


def split_option(text: str) -> tuple[str, str]:
    """`key=value` -> (key, value); ValueError for anything else."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"a credit option is key=value, got {text!r}")
    return key.strip(), value.strip()


def parse_options(cls: type, pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """Constructor kwargs of `cls` from `(key, value)` text pairs, by `cls.options`.

    Raises:
        ValueError: a key `cls` does not offer (the valid ones listed), a key given twice,
            or a value its parser refuses.
    """
    offered: Mapping[str, OptionParser] = cls.options
    parsed: dict[str, Any] = {}
    for key, value in pairs:
        if key not in offered:
            valid = ", ".join(sorted(offered)) or "none"
            raise ValueError(f"credit module {cls.name} has no option {key!r}; valid: {valid}")
        if key in parsed:
            raise ValueError(f"credit option {key!r} given twice")
        try:
            parsed[key] = offered[key](value)
        except ValueError as error:
            raise ValueError(f"credit option {key}={value}: {error}") from None
    return parsed

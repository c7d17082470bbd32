"""Credit-module options: one frozen, typed dataclass per module that every consumer reads.

A credit module class names its options' dataclass `Options` (`credit.base.CreditModule`),
built and parsed by the machinery env options share (envs/options.py); each field is one
option, declared once with its type, default and one line of help
(`field(default=..., metadata=doc("..."))`), and the dataclass's `__post_init__` checks
the values' ranges. From that one declaration:

- `parse_options(Options, pairs)`: the command line's `key=value` texts
  (`--credit-options`) -> an instance, each value parsed by its field's type (`parse_value`);
  an unknown key, a key given twice or a refused value is one ValueError;
- `canonical_texts(options)`: the run's identity (benchmarks/run/identity.py's run name, config.json
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
from collections.abc import Mapping
from typing import Any

from creditgym.envs import options as shared
from creditgym.envs.options import (
    changed_options,
    check_choices,
    doc,
    doc_of,
    field_types,
    format_value,
    help_lines,
    parse_options,
    parse_value,
)

__all__ = [
    "NoOptions",
    "canonical_texts",
    "check_choices",
    "doc",
    "doc_of",
    "field_types",
    "format_value",
    "options_help",
    "parse_options",
    "parse_value",
    "split_option",
]


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """The options of a module that has none."""


def split_option(text: str) -> tuple[str, str]:
    """`key=value` -> (key, value); ValueError for anything else."""
    return shared.split_option(text, "a credit option")


def canonical_texts(options: Any) -> tuple[str, ...]:
    """`key=value` of every option off its default, sorted by key (the run identity)."""
    return tuple(f"{key}={value}" for key, value in sorted(changed_options(options)))


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
        lines.append(f"{name}:")
        lines.extend(help_lines(cls.Options))
    if none:
        lines.append(f"{', '.join(none)}: no options.")
    return "\n".join(lines)

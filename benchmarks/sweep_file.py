"""The shape and types of a sweep file, checked before any run is built: `check_sweep_file`.

A sweep file (`benchmarks/sweep.py`) is TOML: a `[common]` table and one or more `[[grid]]`
tables of `RunConfig` fields. Each value is checked against its field's declared type
(`benchmarks/run/config.py`, read here, not restated), so that `steps = "abc"`,
`seed = 1.5`, `faults = 3` or `eval_episodes = {a = 1}` is one line naming the file, the
table and the field, not a traceback or a folder named `seed1.5`. In a grid a list is an
axis and each of its values is checked; an empty axis (`seed = []`) would run nothing, so
it is refused too. Ranges and names (a negative step count, an unknown env) are
`benchmarks/run/validate.py`'s to check, once per built configuration.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from creditgym.benchmarks.cli import UsageError, suggest
from creditgym.benchmarks.run.config import RunConfig

SECTIONS = ("common", "grid")
FIELD_TYPES = typing.get_type_hints(RunConfig)
# Fields that hold several words: text ("a,b" / "k=v k=v") or a list of text.
WORD_LIST_FIELDS = frozenset(
    name for name, kind in FIELD_TYPES.items() if typing.get_origin(kind) is tuple
)


def expected_form(kind: Any) -> tuple[tuple[type, ...], tuple[Any, ...] | None, str]:
    """(TOML value types accepted, the allowed values or None, how to say it) of a field
    type; `X | None` accepts what X does (TOML has no null: unset means left out)."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        (kind,) = [arg for arg in typing.get_args(kind) if arg is not type(None)]
    if typing.get_origin(kind) is Literal:
        choices = typing.get_args(kind)
        return (str,), choices, "one of " + ", ".join(map(repr, choices))
    forms: dict[Any, tuple[tuple[type, ...], str]] = {
        bool: ((bool,), "true or false"),
        int: ((int,), "an integer"),
        float: ((int, float), "a number"),
        str: ((str,), "text in quotes"),
        Path: ((str,), "a path in quotes"),
    }
    accepted, said = forms[kind]
    return accepted, None, said


def check_value(path: Path, table: str, key: str, value: Any, in_axis: bool) -> None:
    """One value of `key` (a scalar of [common] or a grid, or one value of a grid's axis),
    or a one-line UsageError naming the file, table and field."""
    if key in WORD_LIST_FIELDS:
        ok = isinstance(value, str) or (
            isinstance(value, list) and all(isinstance(word, str) for word in value)
        )
        said = "text or a list of text" if not in_axis else "text, or a list of text per value"
    else:
        accepted, choices, said = expected_form(FIELD_TYPES[key])
        # TOML's true is a Python int too; no numeric field takes it.
        ok = isinstance(value, accepted) and not (isinstance(value, bool) and bool not in accepted)
        ok = ok and (choices is None or value in choices)
    if not ok:
        where = f"a value of the axis {key}" if in_axis else key
        raise UsageError(
            f"{path}: [{table}] {where} = {shown(value)}: expected {said} "
            f"(RunConfig.{key}, `creditgym run --help`)"
        )


def shown(value: Any) -> str:
    """A TOML value as the user wrote it, roughly, on one line and short."""
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value).replace("\n", " ")
    return text if len(text) <= 60 else text[:57] + "..."


def check_table(path: Path, table: str, values: Any, in_grid: bool) -> None:
    """Every key of one [common] or [[grid]] table: a RunConfig field with values of its
    type; in a grid a list is an axis of such values, which must not be empty."""
    if not isinstance(values, Mapping):
        form = "[[grid]] tables" if in_grid else "a [common] table"
        raise UsageError(f"{path}: {table} = {shown(values)}: expected {form}")
    for key, value in values.items():
        if key not in FIELD_TYPES:
            raise UsageError(
                f"{path}: [{table}] unknown run option {key!r}.{suggest(key, FIELD_TYPES)} "
                "(the options: `creditgym run --help`)"
            )
        if key == "out" and in_grid:
            raise UsageError(
                f"{path}: `out` belongs in [common] (one folder per sweep), not in a grid"
            )
        if in_grid and isinstance(value, list):
            if not value:
                raise UsageError(
                    f"{path}: [{table}] {key} = []: an empty axis runs nothing; give it "
                    "at least one value or leave it out"
                )
            for item in value:
                check_value(path, table, key, item, in_axis=True)
        else:
            check_value(path, table, key, value, in_axis=False)


def check_sweep_file(path: Path, document: Mapping[str, Any]) -> None:
    """The whole parsed sweep file: known sections, a [common] table, at least one
    [[grid]] table, and every value of every field of its declared type.

    Raises:
        UsageError: the first problem, in one line naming the file.
    """
    unknown = sorted(set(document) - set(SECTIONS))
    if unknown:
        raise UsageError(
            f"{path}: unknown section(s) {', '.join(unknown)}; valid: [common] and [[grid]]."
            f"{suggest(unknown[0], SECTIONS)}"
        )
    if "common" in document:
        check_table(path, "common", document["common"], in_grid=False)
    grids = document.get("grid")
    if not isinstance(grids, list) or not grids:
        raise UsageError(
            f"{path}: no [[grid]] table (got {shown(grids)}); a sweep runs the "
            "configurations of one or more [[grid]] tables"
        )
    for number, grid in enumerate(grids, start=1):
        check_table(path, f"grid {number}" if len(grids) > 1 else "grid", grid, in_grid=True)

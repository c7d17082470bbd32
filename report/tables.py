"""Markdown tables of already formatted cells, written once for every report and command."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any


def markdown_table(columns: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A markdown table of already formatted cells (also readable as plain text)."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines.extend("| " + " | ".join(cells) + " |" for cells in rows)
    return "\n".join(lines)


def mapping_table(
    rows: Iterable[Mapping[str, Any]],
    columns: Sequence[str],
    format_float: Callable[[float], str] = str,
) -> str:
    """`markdown_table` of `rows` in `columns` order: floats through `format_float`, other
    values `str`."""
    cells = [
        [format_float(row[c]) if isinstance(row[c], float) else str(row[c]) for c in columns]
        for row in rows
    ]
    return markdown_table(columns, cells)

"""docs/extending.md's recipes, read from the page and run as the files they tell a reader
to create: each recipe's module is written as its named file (`envs/guess/env.py`) under a
temporary folder that `creditgym.<folder>` also searches, so the documented entry point is
imported by Python's own import system and a wrong one fails as it would for the reader.
"""

from __future__ import annotations

import contextlib
import importlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXTENDING = REPO / "docs" / "extending.md"


def docs_section(title: str, page: Path = EXTENDING) -> str:
    """The text of `page`'s `## title` section."""
    text = page.read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match is not None, f"{page.name} has no '## {title}' section"
    return match.group(1)


def documented_file(section: str) -> str:
    """The repository file a recipe's module is, as its prose names it: "a module `x/y.py`"."""
    match = re.search(r"a module\s+`([\w/]+\.py)`", section)
    assert match is not None, "the recipe names no module file (a module `folder/file.py`)"
    return match.group(1)


def module_name(path: str) -> str:
    """The module a repository file is: envs/guess/env.py -> creditgym.envs.guess.env."""
    return "creditgym." + path.removesuffix(".py").replace("/", ".")


def check_entry_point(entry_point: str, path: str) -> None:
    """`entry_point` (`module:name`) names the module that the file `path` is."""
    module = entry_point.partition(":")[0]
    assert module == module_name(path), (
        f"entry point {entry_point!r} does not name {path}, which is {module_name(path)}"
    )


@contextlib.contextmanager
def documented_module(path: str, code: str, scratch: Path) -> Iterator[str]:
    """`code` written as the repository file `path` would be (under `scratch`, searched by
    `creditgym.<folder>`, with `__init__.py` in any folder between); yields its module
    name and afterwards forgets the folder and every module imported from it."""
    assert not (REPO / path).exists(), f"{path} exists: the recipe must name a new file"
    folder, *between, filename = Path(path).parts
    root = scratch / folder
    for depth in range(len(between)):
        package_dir = root.joinpath(*between[: depth + 1])
        package_dir.mkdir(parents=True, exist_ok=True)
        (package_dir / "__init__.py").touch()
    root.mkdir(parents=True, exist_ok=True)
    root.joinpath(*between, filename).write_text(code, encoding="utf-8")
    package = importlib.import_module(f"creditgym.{folder}")
    package.__path__.append(str(root))
    importlib.invalidate_caches()
    try:
        yield module_name(path)
    finally:
        package.__path__.remove(str(root))
        for name, module in list(sys.modules.items()):
            if str(getattr(module, "__file__", None) or "").startswith(str(root)):
                del sys.modules[name]

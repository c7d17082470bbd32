"""docs/overview.md and docs/extending.md hold: every repository file they cite exists, every
`creditgym` name they cite resolves, overview.md lists every command, both say how to add
an environment, a credit module, a statistic and a trainer, and docs/integrations.md gives
the verl entry point pyproject.toml declares. (The environment and credit-module recipes
themselves are run by tests/test_env_registry.py and tests/test_credit_options.py.)
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import tomllib

import pytest

from creditgym import cli
from tests.doc_recipes import REPO, docs_section, documented_file

PAGES = ("docs/overview.md", "docs/extending.md")
FOLDERS = "envs|models|agents|credit|measure|trainers|report|benchmarks|integrations"
# A repository path as the pages write it: a top folder of the repository, then a file.
PATH = re.compile(
    r"(?<![\w/.<])(?:envs|models|agents|credit|measure|trainers|report|benchmarks|integrations"
    r"|creditgym|tests|docs|results|locks|tools)/[\w./<>-]*\.(?:py|md|toml|sh|json)\b"
)
# A name of ours in backticks: `credit.base.CreditModule`, `creditgym.envs.registry`.
NAME = re.compile(rf"`((?:creditgym\.)?(?:{FOLDERS})(?:\.\w+)+)`")
RECIPES = ("Adding an environment", "Adding a credit module")
ADDITIONS = ("an environment", "a credit module", "a statistic", "a trainer")


def missing_paths(text: str) -> list[str]:
    """The repository files `text` cites that do not exist; a path with a `<placeholder>`
    (`trainers/<name>.py`) is a pattern, and the recipes' own new files are left out."""
    return sorted(
        {
            path
            for path in PATH.findall(text)
            if "<" not in path and not (REPO / path).exists() and path not in recipe_files()
        }
    )


def unresolved_names(text: str) -> list[str]:
    """The dotted names of ours in `text` that are neither a module nor an attribute of one."""
    return sorted({name for name in NAME.findall(text) if not resolves(name)})


def resolves(name: str) -> bool:
    """A module (found, not imported: a command's imports are heavy), or an attribute path
    on the longest module that prefixes the name."""
    parts = name.removeprefix("creditgym.").split(".")
    for split in range(len(parts), 0, -1):
        module = "creditgym." + ".".join(parts[:split])
        try:
            if importlib.util.find_spec(module) is None:
                continue
        except ModuleNotFoundError:  # a name under a module, not under a package
            continue
        if split == len(parts):
            return True
        target = importlib.import_module(module)
        for attribute in parts[split:]:
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


def recipe_files() -> set[str]:
    """The files the recipes tell a reader to create (they must not exist yet)."""
    return {documented_file(docs_section(title)) for title in RECIPES}


@pytest.mark.parametrize("page", PAGES)
def test_every_file_a_page_cites_exists(page: str) -> None:
    assert missing_paths((REPO / page).read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("page", PAGES)
def test_every_name_a_page_cites_resolves(page: str) -> None:
    assert unresolved_names((REPO / page).read_text(encoding="utf-8")) == []


def test_the_checks_see_a_missing_file_and_a_missing_name() -> None:
    planted = (
        "Edit `credit/grpo.py` and credit/nowhere.py, call `credit.grpo.GRPO` and "
        "`benchmarks.study.no_such_table`, write `trainers/<name>.py` and "
        "`credit/discounted.py` (the recipe's new file)."
    )
    assert missing_paths(planted) == ["credit/nowhere.py"]
    assert unresolved_names(planted) == ["benchmarks.study.no_such_table"]


def test_the_recipe_files_are_new_files() -> None:
    assert recipe_files() == {"envs/guess/env.py", "credit/discounted.py"}
    assert not any((REPO / path).exists() for path in recipe_files())


def commands_run_as_main() -> set[str]:
    """Modules of benchmarks/ with a `__main__` block: the commands."""
    return {
        path.stem
        for path in (REPO / "benchmarks").glob("*.py")
        if any(
            isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)
            for node in ast.parse(path.read_text(encoding="utf-8")).body
        )
    }


def unlisted_commands(text: str) -> list[str]:
    """Commands (console names and `benchmarks.<module>` names) that `text` does not name."""
    modules = commands_run_as_main() | set(cli.COMMANDS.values())
    wanted = {f"`benchmarks.{module}`" for module in modules}
    wanted |= {f"`{command}`" for command in cli.COMMANDS}
    return sorted(name for name in wanted if name not in text)


def test_the_overview_lists_every_command() -> None:
    overview = (REPO / "docs" / "overview.md").read_text(encoding="utf-8")
    assert {"decomposition", "hindsight_ablation", "gpu_check"} <= commands_run_as_main()
    assert unlisted_commands(overview) == []
    # A page that lost the decomposition row is caught.
    planted = overview.replace("`decomposition`", "").replace("`benchmarks.decomposition`", "")
    assert unlisted_commands(planted) == ["`benchmarks.decomposition`", "`decomposition`"]


def test_both_pages_say_how_to_add_each_kind_of_thing() -> None:
    overview = docs_section("Where to add things", REPO / "docs" / "overview.md")
    for addition in ADDITIONS:
        assert f"**{addition[0].upper()}{addition[1:]}**" in overview, addition
        docs_section(f"Adding {addition}")  # the recipe's section in extending.md


def test_the_verl_entry_point_is_the_one_pyproject_declares() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    (entry_point,) = pyproject["project"]["entry-points"]["verl.plugins"].values()
    integrations = (REPO / "docs" / "integrations.md").read_text(encoding="utf-8")
    assert f'`creditgym = "{entry_point}"`' in integrations
    assert importlib.util.find_spec(entry_point.partition(":")[0]) is not None

"""Registry of credit modules: name -> class. Names are resolved only at the CLI edge.

`MODULES` lists every registered module as one `package.module:Class` line: adding a
module to creditgym is its file plus its line there (docs/extending.md). Third parties
add one with `register("name", MyModule)` or pass `module:Class` to `resolve`; either way
the class follows the contract of `credit.base.CreditModule` (most simply by subclassing
`CreditModuleBase`), and `build` makes the instance.
"""

from __future__ import annotations

import difflib
import importlib

import creditgym
from creditgym.credit.base import (
    CreditContext,
    CreditModule,
    CreditModuleBase,
    CreditOutput,
    NonFiniteError,
    build,
    missing_members,
)

# One line per registered module, in the order `--help` and the registry list them.
MODULES = (
    "creditgym.credit.grpo:GRPO",
    "creditgym.credit.rule_based:RuleBased",
    "creditgym.credit.gigpo:GiGPO",
    "creditgym.credit.hcapo:HCAPO",
    "creditgym.credit.hcapo:HCAPOSeed",
    "creditgym.credit.hp_rlvr:HPRLVR",
    "creditgym.credit.oracle:Oracle",
    "creditgym.credit.hca:HCA",
)


def import_module(name: str):
    """`name`, where `credit.exact_source` as typed at the repository root means the
    installed `creditgym.credit.exact_source` (one module, one class, anywhere); a module
    of that name that creditgym lacks (a user's own `credit.mine`) is imported as given."""
    if name.partition(".")[0] in creditgym.FOLDERS:
        try:
            return importlib.import_module(f"creditgym.{name}")
        except ModuleNotFoundError as missing:
            if missing.name is None or not name.startswith(missing.name.removeprefix("creditgym.")):
                raise
    return importlib.import_module(name)


def import_class(path: str) -> type:
    """The class at `package.module:Class`.

    Raises:
        KeyError: it cannot be imported, or is not a class.
    """
    module_name, _, class_name = path.partition(":")
    try:
        cls = getattr(import_module(module_name), class_name)
    except (ImportError, AttributeError) as error:
        raise KeyError(f"cannot import credit module {path!r}: {error}") from error
    if not isinstance(cls, type):
        raise KeyError(f"credit module {path!r} is not a class")
    return cls


REGISTRY: dict[str, type] = {cls.name: cls for cls in map(import_class, MODULES)}


def register(name: str, cls: type) -> None:
    """Add a credit module class under `name` (overwrites an existing entry)."""
    REGISTRY[name] = cls


def resolve(name: str) -> type:
    """Return the class for a registered name or a `package.module:Class` path.

    Raises:
        KeyError: unknown name; the message lists valid names and close matches.
    """
    if ":" in name:
        cls = import_class(name)
        missing = missing_members(cls)
        if missing:
            raise KeyError(
                f"credit module {name!r} lacks {', '.join(missing)} of the contract "
                "(credit.base.CreditModule; subclassing credit.base.CreditModuleBase gives them)"
            )
        return cls
    if name not in REGISTRY:
        close = difflib.get_close_matches(name, REGISTRY, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise KeyError(
            f"unknown credit module {name!r}; valid: {', '.join(sorted(REGISTRY))}.{hint}"
        )
    return REGISTRY[name]


__all__ = [
    "REGISTRY",
    "CreditContext",
    "CreditModule",
    "CreditModuleBase",
    "CreditOutput",
    "NonFiniteError",
    "build",
    "register",
    "resolve",
]

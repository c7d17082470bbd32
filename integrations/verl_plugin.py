"""creditgym's `verl.plugins` entry point: `import verl` registers its advantage estimators.

verl 0.9.1 imports every entry point of the group `verl.plugins` when `verl` itself is
imported (its `verl/__init__.py`), in the driver and in every Ray worker alike, so the
estimators of `integrations.verl_credit` (`creditgym_grpo`, `creditgym_gigpo`,
`creditgym_rule_based`, `creditgym_hp_rlvr`) and `integrations.verl_hindsight`
(`creditgym_hcapo`) are found with no environment variable (pyproject.toml names this
module under `[project.entry-points."verl.plugins"]`).

verl logs a plugin that fails to load at debug level only, so this module reports a
failure itself, as a warning naming what is missing and the extra that brings it, and
returns: verl then goes on without creditgym's estimators instead of failing to import.
"""

from __future__ import annotations

import importlib
import warnings

ESTIMATOR_MODULES = ("creditgym.integrations.verl_credit", "creditgym.integrations.verl_hindsight")


class PluginWarning(UserWarning):
    """creditgym's estimators could not be registered with verl."""


def register_estimators() -> list[str]:
    """Import each module of `ESTIMATOR_MODULES` (importing registers its estimators).

    Returns the modules that could not be imported; each one is also reported as a
    `PluginWarning` naming the missing package (install ``creditgym[verl]``)."""
    failed = []
    for name in ESTIMATOR_MODULES:
        try:
            importlib.import_module(name)
        except ImportError as error:
            failed.append(name)
            warnings.warn(
                f"creditgym's verl estimators in {name} are not registered: {error} "
                "(install creditgym's verl extra: pip install 'creditgym[verl]')",
                PluginWarning,
                stacklevel=2,
            )
    return failed


register_estimators()

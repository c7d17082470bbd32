"""creditgym: one namespace for the project's folders.

Installed, `creditgym.envs`, `creditgym.models`, `creditgym.agents`, `creditgym.credit`,
`creditgym.measure`, `creditgym.trainers`, `creditgym.report`, `creditgym.benchmarks` and
`creditgym.integrations` are the repository's top-level folders (pyproject.toml maps each
with `package-dir`), so nothing installs a generic top-level name such as `agents` (which
the OpenAI Agents SDK also installs) or `envs`.

Run from a checkout without installing (`python -m benchmarks.run ...` at the repository
root), this package's search path is extended to the repository root, so the same
`creditgym.<folder>` names resolve to the folders beside it. The extension applies only
where the parent folder is a creditgym checkout (its pyproject.toml names the project), never
inside site-packages, where an unrelated `agents` may live.
"""

from __future__ import annotations

import os

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDERS = (
    "envs",
    "models",
    "agents",
    "credit",
    "measure",
    "trainers",
    "report",
    "benchmarks",
    "integrations",
)


def _is_checkout(root: str) -> bool:
    try:
        with open(os.path.join(root, "pyproject.toml"), encoding="utf-8") as handle:
            return 'name = "creditgym"' in handle.read()
    except OSError:
        return False


if _is_checkout(_ROOT) and _ROOT not in __path__:
    __path__.append(_ROOT)

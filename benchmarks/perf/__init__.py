"""Speed and memory measurements: one script per target, listed in docs/performance.md."""

# The scripts load models with `models.registry.load_model`; `small-warm`'s loader is given
# by the warm start on import (models/ may not name trainers/), as for the commands.
from creditgym.trainers import warm_start  # noqa: F401

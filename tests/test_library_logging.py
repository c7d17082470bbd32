"""Library progress goes through `logging`; entry points show creditgym's INFO messages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PROGRAM = """
import logging
from creditgym.benchmarks.cli import show_library_progress
logging.getLogger("creditgym.models.registry").info("before: hidden")
show_library_progress()
logging.getLogger("creditgym.models.registry").info("fetching the model")
logging.getLogger("creditgym.envs.alfworld.data").info("generating games")
logging.getLogger("transformers.modeling_utils").info("another library's chatter")
logging.getLogger("transformers.modeling_utils").warning("another library's warning")
"""


def test_entry_points_show_creditgym_info_and_only_warnings_of_other_libraries():
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert result.stderr.splitlines() == [
        "creditgym.models.registry: fetching the model",
        "creditgym.envs.alfworld.data: generating games",
        "transformers.modeling_utils: another library's warning",
    ]
    assert result.stdout == ""

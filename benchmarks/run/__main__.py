"""`python -m creditgym.benchmarks.run` (or `python -m benchmarks.run` from a checkout)."""

import os
import sys

from creditgym.benchmarks.run import main

if __name__ == "__main__":
    # Tokenizers' thread pool would otherwise warn after the rollout workers fork.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())

"""The commands (`creditgym <command>`, `python -m creditgym.benchmarks.<module>`)."""

import sys

# `python -m [creditgym.]benchmarks.<module>` imports this package while it locates the
# module, with argv[0] still "-m": the module's imports (seconds of torch) follow, and a
# Ctrl-C or a missing extra among them is one line, not a traceback (creditgym/cli.py).
if sys.argv[:1] == ["-m"]:
    from creditgym.cli import report_start_failures

    report_start_failures()

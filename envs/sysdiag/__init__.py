"""SysDiag: a simulated Linux host with one hidden fault (`creditgym/SysDiag-v0`).

Modules, in data-flow order: `host` (the machine's state), `catalog` (a healthy
randomised host), `faults` (the ten fault families), `render` (tool output rows),
`shell` (the command interpreter), `env` (the Gymnasium environment).
"""

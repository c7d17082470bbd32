"""Every creditgym environment, registered with Gymnasium under the `creditgym/` namespace.

Bump the version suffix whenever tasks, rewards or observation text change.
Shared `info` keys (every env): `success` (bool), `task_id` (str), `task` (the task
instruction), `key_step` (bool: ground truth, did the step just taken reveal the root
cause / make progress the solution needs), `feedback` (why the episode ended, at the
end), and `admissible_commands` (list[str]) where the env has them.
Each env owns its step limit (`max_steps`) so that it can report `truncated` with final
feedback instead of being cut silently by a TimeLimit wrapper.
"""

from gymnasium import register

register(id="creditgym/SysDiag-v0", entry_point="envs.sysdiag.env:SysDiagEnv")
register(id="creditgym/ALFWorld-v0", entry_point="envs.alfworld.env:ALFWorldEnv")
register(id="creditgym/CodeExec-v0", entry_point="envs.code.env:CodeExecEnv")

# Command-line short names -> registered ids.
SHORT_NAMES: dict[str, str] = {
    "sysdiag": "creditgym/SysDiag-v0",
    "alfworld": "creditgym/ALFWorld-v0",
    "code": "creditgym/CodeExec-v0",
}

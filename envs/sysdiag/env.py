"""`creditgym/SysDiag-v0`: diagnose and fix one hidden fault on a simulated Linux host.

The agent types shell commands; observations are the commands' output (shaped like
the real tools', see `envs.sysdiag.shell`). Nothing runs on the real machine.

Reward (per step): +1.0 on the step whose effect fixes the root cause (verified on the
host state, then the episode terminates); -0.01 on every other step; `reboot` ends the
episode with `reboot_reward` (default 0.3, `SysDiagOptions`) if the reboot made the symptoms
go away (a transient fault, never diagnosed) and 0.0 if the fault persisted. At
`max_steps` the episode is truncated (`truncated=True`, a timeout, not a policy failure
in gymnasium's sense).

`info` (see `envs/__init__.py`): `success`, `task_id` ("<family>-<n>", decodes to the
instance), `task`, `fault_family`, `admissible_commands` (10-25 concrete commands; PIDs
and paths only once some output has shown them), `key_step` (this step revealed the
root cause for the first time, or advanced its fix), `feedback` (at the end: the
verdict and what the host showed, never the root cause unless `causal_feedback`),
`expert_action` (the scripted expert's next command:
its diagnosis commands, then the fix), `steps`.
"""

from __future__ import annotations

import heapq
import logging
import random
from typing import Any, ClassVar

import gymnasium as gym

from creditgym.envs.spaces import text_space
from creditgym.envs.sysdiag.catalog import build_host
from creditgym.envs.sysdiag.faults import FAULT_FAMILIES, Fault
from creditgym.envs.sysdiag.host import Host
from creditgym.envs.sysdiag.options import SUCCESS_REWARD, SysDiagOptions
from creditgym.envs.sysdiag.shell import Shell

logger = logging.getLogger(__name__)

STEP_COST = 0.01
DEFAULT_MAX_STEPS = 30
OBSERVATION_MAX_CHARS = 8192
ACTION_MAX_CHARS = 1024
INSTANCES_PER_FAMILY = 100_000  # seeds draw n in [0, this); task ids accept any n >= 0
CACHE_MAX_COMMAND_CHARS = 256

# Final feedback per way an episode ends: the verdict and what the host showed, never the
# root cause, which would hand a hindsight credit module the env's label.
FEEDBACK = {
    "fixed": "Fixed and verified: the service works again. Solved.",
    "reboot_cleared": (
        "The host was rebooted and the symptoms are gone for now, but nothing was verified "
        "as fixed: not solved (reward {reward:g})."
    ),
    "reboot_persisted": "The host was rebooted and the fault persisted: not solved.",
    "step_limit": "Step limit ({limit}) reached; the fault is still present: not solved.",
}
# The earlier feedback (`causal_feedback=True`): each names the root cause.
CAUSAL_FEEDBACK = {
    "fixed": "Fixed and verified. The root cause: {root_cause}.",
    "reboot_cleared": (
        "The host was rebooted: the symptoms are gone for now, but the root cause was never "
        "diagnosed or fixed ({root_cause}); partial credit."
    ),
    "reboot_persisted": "The host was rebooted and the fault persisted: {root_cause}.",
    "step_limit": "Step limit ({limit}) reached; the fault is still present: {root_cause}.",
}

# Read-only commands every state offers; the fault adds its own (see `Fault.candidates`).
BASE_COMMANDS = (
    "ps aux",
    "top -bn1",
    "free -h",
    "df -h",
    "df -i",
    "uptime",
    "dmesg",
    "ss -tlnp",
    "systemctl --failed",
    "cat /etc/resolv.conf",
    "du -sh /var/log/*",
)


def build_instance(family: str, index: int) -> tuple[Host, Fault]:
    """The host and injected fault of task `<family>-<index>` (a pure function of both)."""
    rng = random.Random(f"creditgym/SysDiag-v0/{family}/{index}")
    fault_class = FAULT_FAMILIES[family]
    host, app = build_host(rng, rng.choice(fault_class.apps()))
    fault = fault_class(rng, host, app)
    # Faults edit records in place: invalidate everything computed while building.
    host.rows.clear()
    host.touch()
    return host, fault


def parse_task_id(task_id: object, families: tuple[str, ...]) -> tuple[str, int]:
    """`"cpu_hog-17"` -> ("cpu_hog", 17); a clear ValueError for anything else."""
    family, _, index = str(task_id).rpartition("-")
    if family not in families or not index.isdigit():
        raise ValueError(
            f"task_id {task_id!r} is not '<family>-<n>' with family in {list(families)} "
            "and n a non-negative integer"
        )
    return family, int(index)


def clip(text: str) -> str:
    """Keep the observation inside the observation space's length."""
    if len(text) <= OBSERVATION_MAX_CHARS:
        return text
    note = f"\n[... output truncated: {len(text) - OBSERVATION_MAX_CHARS + 80} more characters ...]"
    return text[: OBSERVATION_MAX_CHARS - len(note)] + note


class SysDiagEnv(gym.Env[str, str]):
    """A simulated Linux host with one hidden fault from one of ten families.

    Args (`reboot_reward` and `causal_feedback` fields of `SysDiagOptions`, which checks
    them):
        faults: the fault families to draw from (default: all, see `FAULT_FAMILIES`);
            a subset makes curricula and focused tests.
        max_steps: step limit; reaching it truncates the episode.
        reboot_reward: what a reboot that clears a transient fault's symptoms pays, in
            [0, `SUCCESS_REWARD`]; 0 takes away the one-step trap (a policy that always
            reboots scores 0.3 on two of three faults of the study at the default).
        causal_feedback: the final feedback names the root cause, as in the earlier text;
            off, it states the verdict and what the host showed. A hindsight credit
            module shown the root cause reads the env's label instead of assigning credit.
        render_mode: None or "ansi" (the last command and its output).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        faults: tuple[str, ...] | list[str] | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        render_mode: str | None = None,
        **options: Any,
    ) -> None:
        families = tuple(faults) if faults is not None else tuple(FAULT_FAMILIES)
        unknown = [f for f in families if f not in FAULT_FAMILIES]
        if unknown or not families:
            raise ValueError(
                f"unknown fault families {unknown or '(empty list)'}; "
                f"choose from {sorted(FAULT_FAMILIES)}"
            )
        if not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be a positive integer, got {max_steps!r}")
        self.options = SysDiagOptions(**options)
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.families = families
        self.max_steps = max_steps
        self.reboot_reward = float(self.options.reboot_reward)
        self.causal_feedback = self.options.causal_feedback
        self.render_mode = render_mode
        self.observation_space = text_space(OBSERVATION_MAX_CHARS)
        self.action_space = text_space(ACTION_MAX_CHARS)
        self.host: Host | None = None
        self.fault: Fault | None = None
        self.shell: Shell | None = None

    # ------------------------------------------------------------------ gym API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        task_id = (options or {}).get("task_id")
        if task_id is None:
            family = self.families[int(self.np_random.integers(len(self.families)))]
            index = int(self.np_random.integers(INSTANCES_PER_FAMILY))
        else:
            family, index = parse_task_id(task_id, self.families)
        self.task_id = f"{family}-{index}"
        self.host, self.fault = build_instance(family, index)
        self.shell = Shell(self.host)
        self.steps = 0
        self.done = False
        self.revealed = False
        self.diagnosis_cursor = 0
        self.best_progress = self.fault.progress(self.host)
        self.seen: set[str] = set()
        self.output_cache: dict[str, tuple[str, int]] = {}
        self.cache_version = -1
        self.candidate_cache: tuple[tuple[int, int], list[tuple[str, str | None]]] = ((-1, -1), [])
        self.fixed_cache: tuple[int, bool, int] = (-1, False, 0)
        self.admissible_cache: tuple[tuple[int, int, int], tuple[str, ...]] = ((-1, -1, -1), ())
        self.unseen_gates: list[str] = []
        unit = self.fault.unit
        self.fixed_candidates: tuple[tuple[str, None], ...] = tuple(
            (command, None)
            for command in (
                *BASE_COMMANDS,
                *self.fault.diagnosis,
                f"systemctl status {unit}",
                f"journalctl -u {unit}",
                f"systemctl restart {unit}",
            )
        )
        self.last_exchange = ""
        observation = (
            f"Welcome to Ubuntu 22.04.4 LTS (GNU/Linux {self.host.kernel} x86_64)\n\n"
            f"Last login: {self.host.now:%a %b %e %H:%M:%S %Y} from 10.0.2.2\n"
            f"root@{self.host.hostname}:~# "
        )
        self.last_exchange = observation
        return observation, self._info(key_step=False, feedback="")

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.shell is None or self.fault is None or self.host is None:
            raise RuntimeError("SysDiagEnv.step() called before reset()")
        if self.done:
            raise RuntimeError("SysDiagEnv.step() called after the episode ended; call reset()")
        line = action if isinstance(action, str) else str(action)
        expected = self._expert_action()
        if line.strip() == expected and self.diagnosis_cursor < len(self.fault.diagnosis):
            self.diagnosis_cursor += 1
        self.steps += 1
        observation = clip(self._run(line))
        self.last_exchange = f"root@{self.host.hostname}:~# {line[:200]}\n{observation}"
        self._mark_seen(observation)

        key_step = False
        if not self.revealed and self.fault.reveals(observation):
            self.revealed = key_step = True
        fixed, progress = self._fixed_and_progress()
        # A reboot that clears a transient fault neither reveals nor fixes the root cause:
        # its apparent progress is not a key step (credit labels would reward the trap).
        if progress > self.best_progress and not self.shell.rebooted:
            self.best_progress = progress
            key_step = True

        terminated, truncated, success = False, False, False
        ending = ""
        if self.shell.rebooted:
            terminated = True
            reward = self.reboot_reward if fixed else 0.0
            ending = "reboot_cleared" if fixed else "reboot_persisted"
        elif fixed:
            terminated = success = True
            reward = SUCCESS_REWARD
            ending = "fixed"
        else:
            reward = -STEP_COST
            if self.steps >= self.max_steps:
                truncated = True
                ending = "step_limit"
        feedback = self._feedback(ending, reward) if ending else ""
        self.done = terminated or truncated
        info = self._info(key_step=key_step, feedback=feedback, success=success)
        return observation, reward, terminated, truncated, info

    def render(self) -> str | None:
        return self.last_exchange if self.render_mode == "ansi" else None

    # ---------------------------------------------------------------- internals
    def _feedback(self, ending: str, reward: float) -> str:
        """The final feedback of an episode that ended as `ending` (a `FEEDBACK` key)."""
        text = (CAUSAL_FEEDBACK if self.causal_feedback else FEEDBACK)[ending]
        return text.format(limit=self.max_steps, reward=reward, root_cause=self.fault.root_cause)

    def _run(self, line: str) -> str:
        """Run `line`, reusing the output of an identical read-only command."""
        shell, host = self.shell, self.host
        if self.cache_version != host.version:
            self.output_cache.clear()
            self.cache_version = host.version
        key = shell.cwd + "\0" + line
        cached = self.output_cache.get(key)
        if cached is not None:
            return cached[0]
        version = host.version
        cwd = shell.cwd
        try:
            output, status = shell.run(line)
        except Exception:  # a simulator bug costs the agent one step, never the rollout
            logger.exception("SysDiag shell failed on %r", line[:200])
            command = line.split()[0] if line.split() else line
            return f"bash: {command[:64]}: internal error"
        if host.version == version and shell.cwd == cwd and len(line) <= CACHE_MAX_COMMAND_CHARS:
            self.output_cache[key] = (output, status)
        return output

    def _fixed_and_progress(self) -> tuple[bool, int]:
        version, fixed, progress = self.fixed_cache
        if version != self.host.version:
            fixed = self.fault.is_fixed(self.host)
            progress = self.fault.progress(self.host)
            self.fixed_cache = (self.host.version, fixed, progress)
        return fixed, progress

    def _candidates(self) -> list[tuple[str, str | None]]:
        """All commands that make sense in this state, with the string gating each.

        Recomputed only after a state change; `unseen_gates` is kept alongside so that
        `_mark_seen` scans just the gates still closed.
        """
        host, fault = self.host, self.fault
        # They depend on the process table only (and the fault's own lists), which changes
        # exactly when its size or the next pid to allocate does: a cheaper key than
        # `host.version`, which also moves on every file write.
        key = (len(host.procs), host.next_pid)
        signature, candidates = self.candidate_cache
        if signature == key:
            return candidates
        procs = host.procs.values()
        busy = heapq.nlargest(
            3, (p for p in procs if p.pid > 2 and p.stat[0] != "Z"), key=lambda p: (p.cpu, -p.pid)
        )
        hungry = max(procs, key=lambda p: (p.rss_kb, -p.pid))
        unique = list(
            dict.fromkeys(
                [
                    *self.fixed_candidates,
                    *((f"kill {p.pid}", str(p.pid)) for p in (*busy, hungry)),
                    *fault.candidates(host),
                    ("reboot", None),
                ]
            )
        )
        self.candidate_cache = (key, unique)
        self.unseen_gates = list(
            dict.fromkeys(g for _c, g in unique if g is not None and g not in self.seen)
        )
        return unique

    def _mark_seen(self, observation: str) -> None:
        self._candidates()
        revealed = [gate for gate in self.unseen_gates if gate in observation]
        if revealed:
            self.seen.update(revealed)
            self.unseen_gates = [gate for gate in self.unseen_gates if gate not in self.seen]

    def _admissible(self) -> list[str]:
        key = (len(self.host.procs), self.host.next_pid, len(self.seen))
        if self.admissible_cache[0] != key:
            seen = self.seen
            commands = [c for c, gate in self._candidates() if gate is None or gate in seen]
            self.admissible_cache = (key, tuple(dict.fromkeys(commands)))
        return list(self.admissible_cache[1])

    def _expert_action(self) -> str:
        diagnosis = self.fault.diagnosis
        if self.diagnosis_cursor < len(diagnosis):
            return diagnosis[self.diagnosis_cursor]
        return self.fault.fix_action(self.host)

    def _info(self, key_step: bool, feedback: str, success: bool = False) -> dict[str, Any]:
        return {
            "success": success,
            "task_id": self.task_id,
            "task": self.fault.task,
            "fault_family": self.fault.family,
            "admissible_commands": self._admissible(),
            "key_step": key_step,
            "feedback": feedback,
            "expert_action": self._expert_action(),
            "steps": self.steps,
        }

"""Every creditgym environment, registered with Gymnasium under the `creditgym/` namespace.

Bump the version suffix whenever tasks, rewards or observation text change.
Shared `info` keys (every env): `success` (bool), `task_id` (str), `task` (the task
instruction), `key_step` (bool: ground truth, did the step just taken reveal the root
cause / make progress the solution needs), `feedback` (why the episode ended, at the
end), and `admissible_commands` (list[str]) where the env has them.
Shared `reset` options: `task_id` (play that task) and `replica` (0..G-1, set by the rollout
engine for the G rollouts of one task: envs with exogenous noise draw it per replica,
envs/seeding.py).
Each env owns its step limit (`max_steps`) so that it can report `truncated` with final
feedback instead of being cut silently by a TimeLimit wrapper; its `EnvInfo` (splits,
default step limit, training kwargs, task-type key, prompt intro, finite-MDP flag, what
`small`'s tokenizer corpus takes from it, task families, its options class) is declared
here, beside it. Each env's options (what `--env-options` may set) are one frozen
dataclass in its folder's `options.py` (ALFWorld's: envs/alfworld_options.py).
"""

from creditgym.envs.alfworld_options import ALFWorldOptions
from creditgym.envs.code.options import CodeExecOptions
from creditgym.envs.keydoor.options import KeyDoorOptions
from creditgym.envs.options import EnvOptions
from creditgym.envs.registry import (
    ENVS,
    DataFingerprint,
    EnvInfo,
    EvalSplit,
    TaskFamilies,
    data_fingerprint,
    env_options_help,
    parse_env_options,
    register_env,
    short_names,
)
from creditgym.envs.sysdiag.options import SysDiagOptions
from creditgym.envs.umbrella.options import UmbrellaOptions

# Seeded random-agent episodes each env gives `small`'s tokenizer corpus (EnvInfo's
# `tokenizer_episodes`; the committed models/small_tokenizer_v1.json was trained on
# them): enough to see every KeyDoor / Umbrella state kind and SysDiag's outputs, while
# CodeExec (a few seconds per episode) contributes its phrasing, not its breadth.
TOKENIZER_EPISODES = 8

register_env(
    EnvInfo(
        id="creditgym/SysDiag-v0",
        short_name="sysdiag",
        # The expert needs 3-4 steps; 5 leaves one step of slack and keeps CPU runs short.
        max_episode_steps=5,
        task_type_key="fault_family",
        intro=(
            "You are a Linux system administrator. A host has one fault. Type one shell "
            "command per turn to find the root cause and fix it."
        ),
        tokenizer_episodes=TOKENIZER_EPISODES,
        task_families=TaskFamilies(
            kwarg="faults", names="creditgym.envs.sysdiag.faults:FAULT_FAMILIES"
        ),
        options=SysDiagOptions,
    ),
    entry_point="creditgym.envs.sysdiag.env:SysDiagEnv",
)
register_env(
    EnvInfo(
        id="creditgym/ALFWorld-v0",
        short_name="alfworld",
        # GiGPO / HCAPO's ALFWorld limit; the planner's walkthroughs need up to ~20 steps.
        max_episode_steps=50,
        eval_splits=(
            EvalSplit("in_distribution", {"split": "eval_in_distribution"}),
            EvalSplit("out_of_distribution", {"split": "eval_out_of_distribution"}),
        ),
        train_kwargs={"split": "train"},
        task_type_key="task_type",
        expert_kwargs={"expert_plan": True},
        # Which game set (generated default, other generated, a folder such as the
        # official data) takes part in the run identity.
        data_fingerprint="creditgym.envs.alfworld.data:data_fingerprint",
        intro="You are an expert agent operating in the ALFRED embodied household environment.",
        options=ALFWorldOptions,
        # Not in the tokenizer corpus: its games are generated on first use (about a
        # minute on an idle 2-core machine, over ten minutes under load); its text still
        # encodes, in more tokens.
    ),
    entry_point="creditgym.envs.alfworld.env:ALFWorldEnv",
)
register_env(
    # v1: hidden tests graded outside the candidate's process (envs/code/grading.py), which
    # changed the failure feedback texts; v0's rewards for honest programs are unchanged.
    EnvInfo(
        id="creditgym/CodeExec-v1",
        short_name="code",
        max_episode_steps=10,
        intro=(
            "You are a programmer solving a task in a sandbox, one action per turn: "
            "`write` followed by a ```python code block, `run`, `test`, or `submit`."
        ),
        tokenizer_episodes=TOKENIZER_EPISODES,
        options=CodeExecOptions,
    ),
    entry_point="creditgym.envs.code.env:CodeExecEnv",
)
register_env(
    EnvInfo(
        id="creditgym/KeyDoor-v0",
        short_name="keydoor",
        # The expert needs delay + 2 = 10 steps at the default delay 8; 12 is the env's
        # own default limit (two spare turns at the door).
        max_episode_steps=12,
        markov=True,
        in_process=True,
        # The two credit instruments' intros say nothing about which action matters (the
        # key, the umbrella), so that learning it is the credit-assignment problem.
        intro=(
            "You are an explorer in a small text world. Each turn, choose one of the "
            "admissible actions."
        ),
        finite_mdp=True,
        tokenizer_episodes=TOKENIZER_EPISODES,
        horizon_option="delay",
        options=KeyDoorOptions,
    ),
    entry_point="creditgym.envs.keydoor.env:KeyDoorEnv",
)
register_env(
    EnvInfo(
        id="creditgym/Umbrella-v0",
        short_name="umbrella",
        # Every episode lasts exactly `length` steps (default 10): a shorter limit would
        # cut the final reward, the only one the first action controls.
        max_episode_steps=10,
        # Success split by forecast: a policy stuck on one choice wins half of the
        # episodes overall and all of one forecast's.
        task_type_key="forecast",
        markov=True,
        in_process=True,
        intro=(
            "You are walking to work in a small text world. Each turn, choose one of the "
            "admissible actions."
        ),
        finite_mdp=True,
        tokenizer_episodes=TOKENIZER_EPISODES,
        horizon_option="length",
        options=UmbrellaOptions,
    ),
    entry_point="creditgym.envs.umbrella.env:UmbrellaEnv",
)

# Command-line short names -> registered ids.
SHORT_NAMES: dict[str, str] = short_names()

__all__ = [
    "ENVS",
    "SHORT_NAMES",
    "DataFingerprint",
    "EnvInfo",
    "EnvOptions",
    "EvalSplit",
    "TaskFamilies",
    "data_fingerprint",
    "env_options_help",
    "parse_env_options",
    "register_env",
]

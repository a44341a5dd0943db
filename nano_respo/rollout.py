"""Rollouts: KV-cached sampling that records the behaviour log-prob of every sampled token.

The recorded log-prob is that of the distribution actually sampled from: softmax(z / T)
with no top-k / top-p truncation (a truncated sampler is a different mu, and the
training forward could not reproduce it). The training forward (`policy_logprobs`) uses
the same temperature and the same position ids, so on a fresh batch log pi == log mu up
to float noise and every sequence weight starts at w = 1.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList

from .logprobs import head_inputs, linear_head, token_logprobs
from .models import is_moe
from .tasks import Problem


@dataclass
class RolloutBatch:
    """Episodes of one rollout batch; row i of every tensor is episode i."""

    input_ids: torch.Tensor        # [N, P + C] left-padded prompt, then right-padded completion
    attention_mask: torch.Tensor   # [N, P + C]
    completion_mask: torch.Tensor  # [N, C] bool, response tokens up to and including EOS
    old_logp: torch.Tensor         # [N, C] sampling log-probs (behaviour policy mu)
    rewards: torch.Tensor          # [N]
    advantages: torch.Tensor       # [N]

    def select(self, index: torch.Tensor) -> "RolloutBatch":
        """The episodes at index, with completion columns that are padding everywhere dropped."""
        rows = {f.name: getattr(self, f.name)[index] for f in fields(self)}
        width = int(rows["completion_mask"].sum(0).nonzero().max()) + 1 if rows["completion_mask"].any() else 1
        drop = self.completion_mask.shape[1] - width
        if drop:
            for name in ("input_ids", "attention_mask"):
                rows[name] = rows[name][:, :-drop]
            for name in ("completion_mask", "old_logp"):
                rows[name] = rows[name][:, :width]
        return RolloutBatch(**rows)

    def to(self, device) -> "RolloutBatch":
        return RolloutBatch(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})


class SamplingLogprobRecorder(LogitsProcessor):
    """Applies the temperature and records log mu of each token that generate then samples.

    A call at step t sees the token sampled at step t-1 as input_ids[:, -1], so only one
    step's [N, V] log-softmax is ever kept. Added as the last processor and with no
    warpers configured, its output is exactly the distribution generate samples from.
    """

    def __init__(self, temperature: float):
        self.temperature = temperature
        self.previous: torch.Tensor | None = None  # [N, V]
        self.logps: list[torch.Tensor] = []  # each [N]

    def __call__(self, input_ids, scores):
        if self.previous is not None:
            self.take(input_ids[:, -1])
        scaled = scores.float() / self.temperature  # [N, V]
        self.previous = torch.log_softmax(scaled, -1)
        return scaled

    def take(self, tokens: torch.Tensor) -> None:
        self.logps.append(self.previous.gather(-1, tokens[:, None]).squeeze(-1))  # [N]

    def result(self, last_tokens: torch.Tensor) -> torch.Tensor:
        self.take(last_tokens)
        return torch.stack(self.logps, 1)  # [N, C]


def encode_prompts(tokenizer, prompts: list[str], device) -> dict[str, torch.Tensor]:
    """Chat-formatted when the tokenizer has a template, left-padded."""
    if tokenizer.chat_template:
        prompts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                                 tokenize=False) for p in prompts]
    encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    return {k: v.to(device) for k, v in encoded.items() if k in ("input_ids", "attention_mask")}


def completion_mask_of(completion_ids: torch.Tensor, eos_ids: list[int]) -> torch.Tensor:
    """True up to and including the first EOS of each row (all True when there is none)."""
    is_eos = torch.isin(completion_ids, torch.tensor(eos_ids, device=completion_ids.device))  # [N, C]
    ended_before = (is_eos.long().cumsum(-1) - is_eos.long()) > 0
    return ~ended_before  # [N, C]


def eos_ids_of(tokenizer, model) -> list[int]:
    ids = model.generation_config.eos_token_id
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    return sorted(set(ids + [tokenizer.eos_token_id]) - {None})


@torch.no_grad()
def sample(model, tokenizer, prompts: list[str], max_new_tokens: int, temperature: float = 1.0,
           greedy: bool = False, batch_size: int | None = None):
    """Generate one completion per prompt (repeat prompts for groups), batch_size prompts per generate call.

    Returns (input_ids [N, P + C], attention_mask, completion_mask [N, C], old_logp [N, C]
    or None when greedy, completion texts).
    """
    prompt = encode_prompts(tokenizer, prompts, model.device)
    eos_ids = eos_ids_of(tokenizer, model)
    # Only these settings may apply: generate fills every unset field from the checkpoint's
    # generation_config.json, whose top_k / top_p / penalties would silently change mu.
    # top_k must be 0, not None: None means "unset", and the global default is top_k = 50.
    warpers = {} if greedy else {"top_k": 0, "top_p": 1.0}
    config = GenerationConfig(do_sample=not greedy, temperature=1.0, **warpers,
                              max_new_tokens=max_new_tokens, eos_token_id=eos_ids,
                              pad_token_id=tokenizer.pad_token_id, use_cache=True,
                              return_dict_in_generate=True)
    was_training, checkpoint_config = model.training, model.generation_config
    model.eval()
    model.generation_config = GenerationConfig()
    completions, logps = [], []
    try:
        for start in range(0, len(prompts), batch_size or len(prompts)):
            part = {k: v[start:start + (batch_size or len(prompts))] for k, v in prompt.items()}
            recorder = SamplingLogprobRecorder(temperature)
            out = model.generate(**part, generation_config=config,
                                 logits_processor=LogitsProcessorList([] if greedy else [recorder]))
            completions.append(out.sequences[:, part["input_ids"].shape[1]:])  # [n, c]
            logps.append(None if greedy else recorder.result(completions[-1][:, -1]))  # [n, c]
    finally:
        model.train(was_training)
        model.generation_config = checkpoint_config
    # A call that stopped early had every row finished, so padding its tail changes no mask.
    width = max(c.shape[1] for c in completions)
    completion_ids = torch.cat([F.pad(c, (0, width - c.shape[1]), value=tokenizer.pad_token_id)
                                for c in completions])  # [N, C]
    old_logp = None if greedy else torch.cat([F.pad(lp, (0, width - lp.shape[1])) for lp in logps])  # [N, C]
    completion_mask = completion_mask_of(completion_ids, eos_ids)  # [N, C]
    sequences = torch.cat([prompt["input_ids"], completion_ids], 1)  # [N, P + C]
    attention_mask = torch.cat([prompt["attention_mask"], completion_mask.long()], 1)  # [N, P + C]
    texts = tokenizer.batch_decode(torch.where(completion_mask, completion_ids, tokenizer.pad_token_id),
                                   skip_special_tokens=True)
    return sequences, attention_mask, completion_mask, old_logp, texts


def score(reward_fn, texts: list[str], problems: list[Problem]):
    """(rewards [N], error messages); a reward function that raises or returns NaN/inf scores 0."""
    rewards, errors = [], []
    for text, problem in zip(texts, problems):
        try:
            value = float(reward_fn(text, problem.answer))
            if value != value or value in (float("inf"), float("-inf")):
                raise ValueError(f"non-finite reward {value}")
        except Exception as error:  # a user verifier may fail in any way; one bad sample must not end the run
            value = 0.0
            errors.append(f"{type(error).__name__}: {error}")
        rewards.append(value)
    return torch.tensor(rewards), errors


def policy_logprobs(model, batch: RolloutBatch, temperature: float, chunk_mb: float | None = None,
                    with_entropy: bool = False):
    """Current-policy log-probs [B, C] of the batch's completion tokens (and entropy, router aux loss).

    Position ids follow the attention mask as in generate, so left padding does not shift
    positions; router logits are requested only here (transformers 5's generate on a MoE
    fails when they are enabled in the config).
    """
    width = batch.completion_mask.shape[1]
    position_ids = (batch.attention_mask.cumsum(-1) - 1).clamp(min=0)  # [B, P + C]
    extra = {"output_router_logits": True} if is_moe(model) else {}
    with head_inputs(model) as collected:
        out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=position_ids,
                    logits_to_keep=width + 1, use_cache=False, **extra)
    hidden = collected[0]  # [B, C + 1, H] position t predicts completion token t, the last one nothing
    # All C + 1 positions, the last with a placeholder target and dropped after: the head's
    # gradient is then one matmul of the same shape as in the logits route this replaced,
    # so on the tiny models its float rounding, and every run, stay bit for bit the same.
    targets = F.pad(batch.input_ids[:, -width:], (0, 1))  # [B, C + 1]
    # Read the head's weight after the forward: under FSDP that is when it is gathered.
    result = token_logprobs(hidden, linear_head(model).weight, targets, temperature, chunk_mb, with_entropy)
    result = tuple(r[:, :-1] for r in result) if with_entropy else result[:, :-1]  # [B, C]
    return result, getattr(out, "aux_loss", None)

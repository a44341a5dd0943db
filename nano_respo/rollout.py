"""Rollouts: a KV-cache sampler that records the behaviour log-prob of every sampled token.

    prefill:  one forward over the left-padded distinct prompts fills the KV cache
    decode:   one forward per new token; sample from softmax(z / T) and keep log mu of the
              sampled token; a row that emitted EOS leaves the batch; stop when all have

The recorded log-prob is that of the distribution actually sampled from: softmax(z / T)
with no top-k / top-p truncation (a truncated sampler is a different mu, which the training
forward would have to truncate alike, as DeepSeek-V3.2's Keep Sampling Mask does; this project
does not). The training forward (`policy_logprobs`) uses the same temperature and the same
position ids, so on a fresh batch log pi == log mu up to float noise and every sequence weight
starts at w = 1.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from tqdm import tqdm

LONG = 256  # a generation budget from which sampling shows a progress bar of its decoding steps


@dataclass
class RolloutBatch:
    """Episodes of one rollout batch; row i of every tensor is episode i."""
    input_ids: torch.Tensor        # [N, P + C] left-padded prompt, then right-padded completion
    attention_mask: torch.Tensor   # [N, P + C]
    completion_mask: torch.Tensor  # [N, C] bool, response tokens up to and including EOS
    old_logp: torch.Tensor         # [N, C] sampling log-probs (behaviour policy mu)
    rewards: torch.Tensor          # [N]
    advantages: torch.Tensor       # [N]
    pi_old_logp: torch.Tensor | None = None  # [N, C] the learner's log-probs at rollout time, when asked for

    def select(self, index: torch.Tensor) -> "RolloutBatch":
        """The episodes at index, with completion columns that are padding everywhere dropped."""
        rows = {f.name: getattr(self, f.name)[index] for f in fields(self) if getattr(self, f.name) is not None}
        used = rows["completion_mask"].any(0).nonzero()  # completion columns some selected episode uses
        drop = self.completion_mask.shape[1] - (int(used.max()) + 1 if len(used) else 1)
        for name in ("input_ids", "attention_mask", "completion_mask", "old_logp", "pi_old_logp"):
            if name in rows:  # all end with the completion
                rows[name] = rows[name][:, :rows[name].shape[1] - drop]
        return RolloutBatch(**rows)


@dataclass
class Samples:
    """What `sample` returns: prompts and completions in the rollout batch's layout."""
    input_ids: torch.Tensor          # [N, P + C]
    attention_mask: torch.Tensor     # [N, P + C]
    completion_mask: torch.Tensor    # [N, C] bool, up to and including the first EOS
    old_logp: torch.Tensor | None    # [N, C] log mu of each sampled token; None when greedy
    truncated: torch.Tensor          # [N] bool, no EOS within the budget
    texts: list[str]                 # the completions, decoded


def encode_prompts(tokenizer, prompts: list[str], device) -> dict[str, torch.Tensor]:
    """Chat-formatted when the tokenizer has a template, left-padded."""
    if tokenizer.chat_template:
        prompts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                                 tokenize=False) for p in prompts]
    encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    return {k: v.to(device) for k, v in encoded.items() if k in ("input_ids", "attention_mask")}


def eos_ids_of(tokenizer, model) -> list[int]:
    """Every id that ends a response: the tokenizer's EOS and the checkpoint's (Qwen3 lists two)."""
    ids = model.generation_config.eos_token_id
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    return sorted(set(ids + [tokenizer.eos_token_id]) - {None})


def real_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that count the real tokens only (left padding at 0): the sampler's, which every forward
    over the same tokens must repeat for log pi to equal log mu."""
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


def kv_cache(out) -> dict:
    """A forward's KV cache as the keyword that hands it back: `cache` from transformers 5.24, else past_key_values."""
    name = "cache" if getattr(out, "cache", None) is not None else "past_key_values"
    return {name: getattr(out, name)}


@torch.no_grad()
def decode(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int,
           temperature: float, greedy: bool, eos_ids: list[int], pad_id: int):
    """Prefill, then one forward per token on the KV cache: (tokens, log mu, in_response [n, c], ended [n]).

    Two savings are part of the plain form, since neither changes what a row sees: each distinct prompt is
    prefilled once and its cache copied to its G samples, and a row that emitted EOS leaves the decode batch
    (with its cache). log mu is 0 after a row's EOS, outside its response.
    """
    n, device = len(input_ids), input_ids.device
    distinct, copy_of = torch.unique(torch.cat([input_ids, attention_mask], 1), dim=0, return_inverse=True)
    prompt_ids, prompt_mask = distinct.split(input_ids.shape[1], 1)  # [u, P] each, u distinct prompts
    prompt_positions = real_positions(prompt_mask)  # [u, P]
    out = model(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=prompt_positions,
                use_cache=True, logits_to_keep=1)
    cache, logits = kv_cache(out), out.logits[copy_of, -1]  # {keyword: KV cache}, [n, V]
    (keys_values,) = cache.values()
    keys_values.batch_select_indices(copy_of)  # [n, ...] each row its prompt's keys and values
    position = prompt_positions[copy_of, -1:]  # [n, 1]
    eos = torch.tensor(eos_ids, device=device)
    alive = torch.arange(n, device=device)  # [a] the rows still decoding, in the batch's numbering
    tokens = torch.full((n, max_new_tokens), pad_id, dtype=input_ids.dtype, device=device)
    logps = torch.zeros(n, max_new_tokens, device=device)
    in_response = torch.zeros(n, max_new_tokens, dtype=torch.bool, device=device)
    for step in tqdm(range(max_new_tokens), desc="sampling", leave=False, disable=max_new_tokens < LONG):
        logp = torch.log_softmax(logits.float() / temperature, -1)  # [a, V] log mu
        token = logp.argmax(-1) if greedy else torch.multinomial(logp.exp(), 1).squeeze(-1)  # [a]
        tokens[alive, step], in_response[alive, step] = token, True
        logps[alive, step] = logp.gather(-1, token[:, None]).squeeze(-1)
        done = torch.isin(token, eos)  # [a]
        if done.all() or step == max_new_tokens - 1:
            break
        if done.any():  # the finished rows leave the batch and its cache
            keep = (~done).nonzero().squeeze(-1)
            alive, token, attention_mask, position = alive[keep], token[keep], attention_mask[keep], position[keep]
            keys_values.batch_select_indices(keep)
        attention_mask = F.pad(attention_mask, (0, 1), value=1)  # [a, P + t + 1] the left padding stays masked
        position = position + 1
        logits = model(input_ids=token[:, None], attention_mask=attention_mask, position_ids=position,
                       use_cache=True, **cache).logits[:, -1]  # [a, V]
    ended = torch.ones(n, dtype=torch.bool, device=device)
    ended[alive[~done]] = False  # still decoding when the budget ran out
    return tokens[:, :step + 1], logps[:, :step + 1], in_response[:, :step + 1], ended


@torch.no_grad()
def sample(model, tokenizer, prompts: list[str], max_new_tokens: int, temperature: float = 1.0,
           greedy: bool = False, batch_size: int | None = None) -> Samples:
    """One completion per prompt (repeat prompts for groups), decoded batch_size prompts at a time."""
    prompt = encode_prompts(tokenizer, prompts, model.device)
    eos_ids = eos_ids_of(tokenizer, model)
    step = batch_size or len(prompts)
    was_training = model.training
    model.eval()
    try:
        parts = [decode(model, prompt["input_ids"][i:i + step], prompt["attention_mask"][i:i + step],
                         max_new_tokens, temperature, greedy, eos_ids, tokenizer.pad_token_id)
                 for i in range(0, len(prompts), step)]
    finally:
        model.train(was_training)
    # A part that stopped early had every row finished: its padded tail lies outside every response.
    width = max(tokens.shape[1] for tokens, *_ in parts)
    completion_ids = torch.cat([F.pad(tokens, (0, width - tokens.shape[1]), value=tokenizer.pad_token_id)
                                for tokens, *_ in parts])  # [N, C]
    old_logp = torch.cat([F.pad(logp, (0, width - logp.shape[1])) for _, logp, *_ in parts])  # [N, C]
    completion_mask = torch.cat([F.pad(mask, (0, width - mask.shape[1])) for _, _, mask, _ in parts])  # [N, C]
    texts = tokenizer.batch_decode(torch.where(completion_mask, completion_ids, tokenizer.pad_token_id),
                                   skip_special_tokens=True)
    return Samples(input_ids=torch.cat([prompt["input_ids"], completion_ids], 1),  # [N, P + C]
                   attention_mask=torch.cat([prompt["attention_mask"], completion_mask.long()], 1),
                   completion_mask=completion_mask, old_logp=None if greedy else old_logp,
                   truncated=~torch.cat([ended for *_, ended in parts]), texts=texts)


def score(reward_fn, texts: list[str], answers: list[str]):
    """(rewards [N], error messages); a reward function that raises or returns NaN/inf scores 0."""
    rewards, errors = [], []
    for text, answer in zip(texts, answers):
        try:
            value = float(reward_fn(text, answer))
            if value != value or value in (float("inf"), float("-inf")):
                raise ValueError(f"non-finite reward {value}")
        except Exception as error:  # a user verifier may fail in any way; one bad sample must not end the run
            value = 0.0
            errors.append(f"{type(error).__name__}: {error}")
        rewards.append(value)
    return torch.tensor(rewards), errors


def training_forward(model, batch: RolloutBatch):
    """(output, completion width C) of the forward every log-prob route shares: the sampler's position ids."""
    width = batch.completion_mask.shape[1]
    position_ids = real_positions(batch.attention_mask)  # [B, P + C]
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=position_ids,
                logits_to_keep=width + 1, use_cache=False, **router_outputs(model))
    return out, width


def router_outputs(model) -> dict:
    """MoE: ask for the router logits, from which the model computes its load-balancing loss."""
    return {"output_router_logits": True} if hasattr(model.config, "output_router_logits") else {}


def tempered_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool):
    """(log-prob of each target, entropy or None) under the tempered softmax the sampler drew from."""
    logp_all = torch.log_softmax(logits.float() / temperature, -1)  # [..., V]
    logp = logp_all.gather(-1, targets[..., None]).squeeze(-1)  # [...]
    return logp, -(logp_all.exp() * logp_all).sum(-1).detach() if with_entropy else None


def unpacked(values: torch.Tensor | None, packing, shape: torch.Size) -> torch.Tensor | None:
    """Per-token values [K] in a scale/ route's layout order (its packing's rows and cols) back to the batch's
    [B, C] (0 outside the completion mask)."""
    if values is None:
        return None
    return values.new_zeros(shape).index_put((packing.rows, packing.cols), values)


def policy_logprobs(model, batch: RolloutBatch, temperature: float, with_entropy: bool = False):
    """(log pi [B, C] of the batch's completion tokens, entropy [B, C] or None, MoE router aux loss or None).

    The same tempered log-softmax the sampler recorded, at the same position ids; router logits only here (the
    sampler needs none). scale/ gives the same numbers by other routes: without padding (scale.packed,
    --packed-forward), each prompt once (scale.shared_prompts), without the [B, C, V] logits (scale.logprobs).
    """
    out, width = training_forward(model, batch)
    # Position t predicts completion token t; the last position predicts nothing.
    logits, targets = out.logits[:, :-1], batch.input_ids[:, -width:]  # [B, C, V], [B, C]
    logp, entropy = tempered_logprobs(logits, targets, temperature, with_entropy)  # [B, C]
    return logp, entropy, getattr(out, "aux_loss", None)

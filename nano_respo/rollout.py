"""Rollouts: a KV-cache sampler that records the behaviour log-prob of every sampled token.

    prefill:  one forward over the left-padded prompts fills the KV cache
    decode:   one forward per new token; sample from softmax(z / T) and keep log mu of the
              sampled token; a row that emitted EOS pads from then on; stop when all have

The recorded log-prob is that of the distribution actually sampled from: softmax(z / T)
with no top-k / top-p truncation (a truncated sampler is a different mu, and the
training forward could not reproduce it). The training forward (`policy_logprobs`) uses
the same temperature and the same position ids, so on a fresh batch log pi == log mu up
to float noise and every sequence weight starts at w = 1.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F


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


@torch.no_grad()
def decode(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int,
           temperature: float, greedy: bool, eos_ids: list[int], pad_id: int):
    """Prefill, then one forward per token on the KV cache: (tokens, log mu, in_response [n, c], ended [n])."""
    position_ids = real_positions(attention_mask)  # [n, P]
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                use_cache=True, logits_to_keep=1)
    position = position_ids[:, -1:]  # [n, 1]
    eos = torch.tensor(eos_ids, device=input_ids.device)
    finished = torch.zeros(len(input_ids), dtype=torch.bool, device=input_ids.device)  # [n]
    tokens, logps, in_response = [], [], []
    for _ in range(max_new_tokens):
        logp = torch.log_softmax(out.logits[:, -1].float() / temperature, -1)  # [n, V] log mu
        token = logp.argmax(-1) if greedy else torch.multinomial(logp.exp(), 1).squeeze(-1)  # [n]
        token = torch.where(finished, pad_id, token)
        tokens.append(token)
        in_response.append(~finished)  # [n] up to and including the first EOS
        logps.append(logp.gather(-1, token[:, None]).squeeze(-1))  # [n]
        finished |= torch.isin(token, eos)
        if finished.all():
            break
        attention_mask = F.pad(attention_mask, (0, 1), value=1)  # [n, P + t + 1] the left padding stays masked
        position = position + 1
        out = model(input_ids=token[:, None], attention_mask=attention_mask, position_ids=position,
                    cache=out.cache, use_cache=True)
    return torch.stack(tokens, 1), torch.stack(logps, 1), torch.stack(in_response, 1), finished


@torch.no_grad()
def decode_lean(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int,
                temperature: float, greedy: bool, eos_ids: list[int], pad_id: int):
    """decode doing less work, with the same outputs' layout: (tokens, log mu, in_response [n, c], ended [n]).

    Each distinct prompt is prefilled once and its KV cache copied to its samples (a group's G rows share
    one prompt), and a row that emitted EOS leaves the decode batch. Every remaining row sees the same
    tokens at the same positions as in decode, so each row's distribution is the same; the draws differ
    from decode's (fewer rows consume the random stream). log mu is 0 after a row's EOS (decode records
    the padding's there; both lie outside the response).
    """
    n, device = len(input_ids), input_ids.device
    distinct, copy_of = torch.unique(torch.cat([input_ids, attention_mask], 1), dim=0, return_inverse=True)
    prompt_ids, prompt_mask = distinct.split(input_ids.shape[1], 1)  # [u, P] each, u distinct prompts
    prompt_positions = real_positions(prompt_mask)  # [u, P]
    out = model(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=prompt_positions,
                use_cache=True, logits_to_keep=1)
    cache, logits = out.cache, out.logits[copy_of, -1]  # [n, V]
    cache.batch_select_indices(copy_of)  # [n, ...] each row its prompt's keys and values
    position = prompt_positions[copy_of, -1:]  # [n, 1]
    eos = torch.tensor(eos_ids, device=device)
    alive = torch.arange(n, device=device)  # [a] the rows still decoding, in the batch's numbering
    tokens = torch.full((n, max_new_tokens), pad_id, dtype=input_ids.dtype, device=device)
    logps = torch.zeros(n, max_new_tokens, device=device)
    in_response = torch.zeros(n, max_new_tokens, dtype=torch.bool, device=device)
    for step in range(max_new_tokens):
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
            cache.batch_select_indices(keep)
        attention_mask = F.pad(attention_mask, (0, 1), value=1)  # [a, P + t + 1]
        position = position + 1
        logits = model(input_ids=token[:, None], attention_mask=attention_mask, position_ids=position,
                       cache=cache, use_cache=True).logits[:, -1]  # [a, V]
    ended = torch.ones(n, dtype=torch.bool, device=device)
    ended[alive[~done]] = False  # still decoding when the budget ran out
    width = step + 1
    return tokens[:, :width], logps[:, :width], in_response[:, :width], ended


@torch.no_grad()
def sample(model, tokenizer, prompts: list[str], max_new_tokens: int, temperature: float = 1.0,
           greedy: bool = False, batch_size: int | None = None, decoder=decode) -> Samples:
    """One completion per prompt (repeat prompts for groups), decoded batch_size prompts at a time.

    decoder: decode, or decode_lean (each distinct prompt prefilled once, finished rows dropped; --lean-sampler).
    """
    prompt = encode_prompts(tokenizer, prompts, model.device)
    eos_ids = eos_ids_of(tokenizer, model)
    step = batch_size or len(prompts)
    was_training = model.training
    model.eval()
    try:
        parts = [decoder(model, prompt["input_ids"][i:i + step], prompt["attention_mask"][i:i + step],
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


def policy_logprobs(model, batch: RolloutBatch, temperature: float, with_entropy: bool = False):
    """(log pi [B, C] of the batch's completion tokens, entropy [B, C] or None, MoE router aux loss or None).

    The same tempered log-softmax the sampler recorded, at the same position ids; router logits only here (the
    sampler needs none). packed_policy_logprobs gives the same without padding (--packed-forward), and
    scale.logprobs.chunked_policy_logprobs without the [B, C, V] logits.
    """
    out, width = training_forward(model, batch)
    # Position t predicts completion token t; the last position predicts nothing.
    logits, targets = out.logits[:, :-1], batch.input_ids[:, -width:]  # [B, C, V], [B, C]
    logp, entropy = tempered_logprobs(logits, targets, temperature, with_entropy)  # [B, C]
    return logp, entropy, getattr(out, "aux_loss", None)


@dataclass
class Packing:
    """A batch's sequences laid end to end in R rows of L tokens, the longest sequence's length (see `pack`)."""
    input_ids: torch.Tensor     # [R, L] each row: whole sequences, then filler
    position_ids: torch.Tensor  # [R, L] 0, 1, ... restarting with each sequence (and with the filler)
    real: torch.Tensor          # [R, L] bool, False on the filler
    predicting: torch.Tensor    # [R, L] bool, the positions whose next token is a completion token
    rows: torch.Tensor          # [K] the batch row of each predicted token, in packed (row-major) order
    cols: torch.Tensor          # [K] its completion column


def first_fit(lengths: list[int], capacity: int) -> tuple[list[tuple[int, int]], list[int]]:
    """Longest first, each sequence into the first row with room: ((row, offset) per sequence, tokens per row)."""
    placement, used = [(0, 0)] * len(lengths), []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        row = next((r for r, u in enumerate(used) if u + lengths[i] <= capacity), len(used))
        if row == len(used):
            used.append(0)
        placement[i] = (row, used[row])
        used[row] += lengths[i]
    return placement, used


def pack(batch: RolloutBatch) -> Packing:
    """The batch's real tokens packed into rows no longer than its longest sequence, without padding.

    Rows that long keep the attention's cost per token at most the padded forward's (one long row would
    cost the whole batch's length per token). A row's unused tail is filler: pad-free in the sense that
    it is its own sequence, seen by no real token. Positions restart at 0 with each sequence and no
    attention mask is passed, which transformers reads as packed sequences
    (masking_utils.find_packed_sequence_indices): attention is block-diagonal causal, each sequence seeing
    only its own tokens at the positions the padded forward gives them.
    """
    real = batch.attention_mask.bool()  # [B, P + C]
    lengths = real.sum(-1)  # [B]
    width = int(lengths.max())
    placement, used = first_fit(lengths.tolist(), width)
    device = real.device
    start = torch.tensor([r * width + o for r, o in placement], device=device)  # [B] first slot of each sequence
    slot = start[:, None] + real.cumsum(-1) - 1  # [B, P + C] where each real token lands (where real)
    n = len(used) * width
    input_ids = torch.zeros(n, dtype=batch.input_ids.dtype, device=device)  # [R * L] filler: token 0
    input_ids[slot[real]] = batch.input_ids[real]
    # The filler's positions restart too, so it is a sequence of its own; real tokens get the sampler's.
    position_ids = (torch.arange(width, device=device) - torch.tensor(used, device=device)[:, None]).flatten()
    position_ids[slot[real]] = real_positions(batch.attention_mask)[real]
    is_real = torch.zeros(n, dtype=torch.bool, device=device)
    is_real[slot[real]] = True
    # Completion token t sits at column P + t and is predicted at column P + t - 1 (a real token while t is).
    completion = batch.completion_mask.shape[1]
    predicted_from = slot[:, -completion - 1:-1][batch.completion_mask]  # [K] in batch order
    rows, cols = batch.completion_mask.nonzero(as_tuple=True)  # [K] in batch order
    predicting = torch.zeros(n, dtype=torch.bool, device=device)
    predicting[predicted_from] = True
    packed_order = predicted_from.argsort()  # [K] the order the model returns the kept positions in
    return Packing(input_ids.view(-1, width), position_ids.view(-1, width), is_real.view(-1, width),
                   predicting.view(-1, width), rows[packed_order], cols[packed_order])


def balance_loss(model, router_logits, weights: torch.Tensor) -> torch.Tensor:
    """The model's own MoE load-balancing loss, its averages taken with these token weights [R, L] (0: not counted)."""
    balance = sys.modules[type(model).__module__].load_balancing_loss_func
    return balance(router_logits, model.config.num_experts, model.config.num_experts_per_tok, weights)


def packed_forward(model, batch: RolloutBatch):
    """(output with logits [K, V] and, under MoE, aux_loss; the completion tokens they predict [K]; the packing).

    training_forward without padding: the same tokens at the same positions attending to the same tokens,
    so the same log-probs up to float noise, with the matrix products over the real tokens only and the
    logits only where a completion token is predicted (K of them, in packed order).
    """
    packing = pack(batch)
    out = model(input_ids=packing.input_ids, position_ids=packing.position_ids, logits_to_keep=packing.predicting,
                use_cache=False, **router_outputs(model))
    flat_ids = packing.input_ids.flatten()
    targets = flat_ids[packing.predicting.flatten().nonzero().squeeze(-1) + 1]  # [K] the next token of each
    if getattr(out, "router_logits", None) is not None:
        # The model averaged its load-balancing loss over the filler too; over the real tokens, as padded does.
        out.aux_loss = balance_loss(model, out.router_logits, packing.real)
    return out, targets, packing


def unpacked(values: torch.Tensor | None, packing, shape: torch.Size) -> torch.Tensor | None:
    """Per-token values [K] in a layout's order (a Packing's or a SharedPacking's rows and cols) back to the
    batch's [B, C] (0 outside the completion mask)."""
    if values is None:
        return None
    return values.new_zeros(shape).index_put((packing.rows, packing.cols), values)


def packed_policy_logprobs(model, batch: RolloutBatch, temperature: float, with_entropy: bool = False):
    """policy_logprobs through packed_forward (--packed-forward): no padding, 0 outside the completion mask."""
    out, targets, packing = packed_forward(model, batch)
    logp, entropy = tempered_logprobs(out.logits.view(len(targets), -1), targets, temperature, with_entropy)  # [K]
    shape = batch.completion_mask.shape
    return unpacked(logp, packing, shape), unpacked(entropy, packing, shape), getattr(out, "aux_loss", None)


@torch.no_grad()
def router_choices(model, batch: RolloutBatch) -> torch.Tensor:
    """MoE: the top-k experts [L, B, C, k] (sorted) each layer's router picks where a completion token is predicted.

    Qwen3-MoE returns, with output_router_logits, one [B * (P + C), experts] tensor of router logits per layer
    (its Qwen3MoeTopKRouter's first output); the router takes the top-k of their softmax, so of the logits too.
    """
    width = batch.completion_mask.shape[1]
    position_ids = real_positions(batch.attention_mask)  # [B, P + C]
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=position_ids,
                logits_to_keep=1, use_cache=False, output_router_logits=True)
    n, length = batch.input_ids.shape
    k = model.config.num_experts_per_tok
    return torch.stack([logits.view(n, length, -1)[:, -width - 1:-1].topk(k, -1).indices.sort(-1).values
                        for logits in out.router_logits])  # [L, B, C, k]


@dataclass
class SharedPacking:
    """A batch laid out with each distinct prompt once, its completions after it in the same row (see `pack_shared`)."""
    input_ids: torch.Tensor     # [R, L] a prompt, its completions, then filler
    position_ids: torch.Tensor  # [R, L] the sampler's: a completion's token t at its prompt's length + t
    attention: torch.Tensor     # [R, 1, L, L] bool, True where the row's token may attend (the prompt, its own tokens)
    counts: torch.Tensor        # [R, L] how many batch rows hold each token (a prompt's G; 1; 0 on the filler)
    predicting: torch.Tensor    # [R, L] bool, the positions whose next token is some completion's token
    source: torch.Tensor        # [K] for each completion token (batch order), its predicting position's rank
    targets: torch.Tensor       # [K] the completion tokens, in batch order (batch.completion_mask's nonzero order)
    rows: torch.Tensor          # [K] the batch row of each
    cols: torch.Tensor          # [K] its completion column


def pack_shared(batch: RolloutBatch) -> SharedPacking:
    """The batch's real tokens with each distinct prompt once: a row per prompt, [prompt, completion 1, ...].

    A group's G samples repeat one prompt, whose tokens see only the prompt before them, so their hidden states
    are the same in every sample: computing them once gives every completion the same keys and values to attend
    to. Each completion attends to its prompt and to itself, causally, at the sampler's positions, so every
    completion token sees what it sees in the padded forward; the last prompt position predicts the first token
    of each of its completions. The mask is dense ([R, L, L]), which suits short rows (G completions of tens
    of tokens); at thousands of tokens per row it would dominate the memory.
    """
    width = batch.completion_mask.shape[1]
    prompt_width = batch.input_ids.shape[1] - width
    distinct, copy_of = torch.unique(torch.cat([batch.input_ids[:, :prompt_width],
                                                batch.attention_mask[:, :prompt_width]], 1), dim=0, return_inverse=True)
    positions = real_positions(batch.attention_mask)  # [B, P + C]
    lengths = batch.completion_mask.sum(-1).tolist()  # [B]
    layout = []  # per prompt: its row's (ids, positions, segment, counts)
    # Per batch row: its layout row, the slot its completion starts at, the slot of its prompt's last token.
    row_of, start_of, last_of = ([0] * len(lengths) for _ in range(3))
    for prompt in range(len(distinct)):
        members = (copy_of == prompt).nonzero().squeeze(-1).tolist()  # the batch rows holding this prompt
        real = batch.attention_mask[members[0], :prompt_width].bool()
        n_prompt = int(real.sum())
        ids, pos = [batch.input_ids[members[0], :prompt_width][real]], [positions[members[0], :prompt_width][real]]
        segment, counts = [torch.zeros(n_prompt, dtype=torch.long)], [torch.full((n_prompt,), len(members))]
        start = n_prompt  # the next free slot of the row
        for k, row in enumerate(members, 1):  # segment 0 is the prompt, k its k-th completion
            n = lengths[row]
            ids.append(batch.input_ids[row, prompt_width:prompt_width + n])
            pos.append(positions[row, prompt_width:prompt_width + n])
            segment.append(torch.full((n,), k))
            counts.append(torch.ones(n, dtype=torch.long))
            row_of[row], start_of[row], last_of[row] = prompt, start, n_prompt - 1
            start += n
        layout.append([torch.cat(parts).to(batch.input_ids.device) for parts in (ids, pos, segment, counts)])
    length = max(len(ids) for ids, *_ in layout)
    device = batch.input_ids.device
    input_ids, position_ids, segment, counts = (
        torch.stack([F.pad(parts[i], (0, length - len(parts[i])), value=fill) for parts in layout])
        for i, fill in enumerate((0, 0, -1, 0)))  # [R, L] each; the filler is segment -1
    causal = torch.ones(length, length, dtype=torch.bool, device=device).tril()  # [L, L]
    sees = (segment[:, None, :] == 0) | (segment[:, :, None] == segment[:, None, :])  # [R, L, L]: query, key
    # The filler sees itself only, so no row of the attention is empty.
    attention = (causal & sees & (segment[:, :, None] >= 0)) | torch.eye(length, dtype=torch.bool, device=device)
    rows, cols = batch.completion_mask.nonzero(as_tuple=True)  # [K] in batch order
    row_of, start_of, last_of = (torch.tensor(v, device=device)[rows] for v in (row_of, start_of, last_of))  # [K]
    # Completion token t is predicted at its prompt's last token (t = 0), else at its own token t - 1.
    slot = torch.where(cols == 0, last_of, start_of + cols - 1)  # [K]
    predicting = torch.zeros(len(layout), length, dtype=torch.bool, device=device)
    predicting[row_of, slot] = True
    rank = predicting.flatten().cumsum(0) - 1  # [R * L] each predicting position's rank, row-major
    return SharedPacking(input_ids, position_ids, attention[:, None], counts.float(), predicting,
                         rank[row_of * length + slot], batch.input_ids[:, prompt_width:][rows, cols], rows, cols)


def shared_prompt_policy_logprobs(model, batch: RolloutBatch, temperature: float, with_entropy: bool = False):
    """policy_logprobs with each distinct prompt computed once (--shared-prompts): 0 outside the completion mask."""
    packing = pack_shared(batch)
    mask = packing.attention  # [R, 1, L, L] bool, the form of transformers' own sdpa masks
    if model.config._attn_implementation == "eager":  # eager adds its mask to the scores
        dtype = next(model.parameters()).dtype
        mask = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)
    elif model.config._attn_implementation != "sdpa":
        raise ValueError(f"shared_prompts: needs sdpa or eager attention, not {model.config._attn_implementation!r}")
    # The decoder, then the head on the predicting positions: the causal-LM wrapper would hand this mask to the
    # MoE load-balancing loss, which expects a [B, T] padding mask; that loss is computed here instead.
    out = model.get_decoder()(input_ids=packing.input_ids, position_ids=packing.position_ids, attention_mask=mask,
                              use_cache=False, **router_outputs(model))
    logits = model.get_output_embeddings()(out.last_hidden_state[packing.predicting])[packing.source]  # [K, V]
    # Each token counted as often as the padded batch holds it (a prompt's G times), as its masked average does.
    aux_loss = None if getattr(out, "router_logits", None) is None else balance_loss(model, out.router_logits,
                                                                                     packing.counts)
    logp, entropy = tempered_logprobs(logits, packing.targets, temperature, with_entropy)  # [K] in batch order
    shape = batch.completion_mask.shape
    return unpacked(logp, packing, shape), unpacked(entropy, packing, shape), aux_loss

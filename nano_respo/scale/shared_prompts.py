"""RL's training forward with each distinct prompt computed once (--shared-prompts): policy_logprobs' drop-in.

A group's G samples repeat one prompt; here each prompt is computed once, its completions laid
after it in the same row, each attending to the prompt and to itself (tests/step/test_less_work.py
checks log-probs, entropies, the MoE loss and gradients against the padded forward).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..rollout import RolloutBatch, real_positions, router_outputs, tempered_logprobs, unpacked
from .packed import balance_loss


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

"""The sampler doing less work for the same distribution (--lean-sampler): rollout.decode's drop-in.

Each distinct prompt is prefilled once and its KV cache copied to its G samples, and a row that
emitted EOS leaves the decode batch. tests/step/test_less_work.py checks that every row draws from the
same distribution as rollout.decode's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..rollout import kv_cache, real_positions


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
    cache, logits = kv_cache(out), out.logits[copy_of, -1]  # {keyword: KV cache}, [n, V]
    (keys_values,) = cache.values()
    keys_values.batch_select_indices(copy_of)  # [n, ...] each row its prompt's keys and values
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
            keys_values.batch_select_indices(keep)
        attention_mask = F.pad(attention_mask, (0, 1), value=1)  # [a, P + t + 1]
        position = position + 1
        logits = model(input_ids=token[:, None], attention_mask=attention_mask, position_ids=position,
                       use_cache=True, **cache).logits[:, -1]  # [a, V]
    ended = torch.ones(n, dtype=torch.bool, device=device)
    ended[alive[~done]] = False  # still decoding when the budget ran out
    width = step + 1
    return tokens[:, :width], logps[:, :width], in_response[:, :width], ended

"""Per-token log-probs of chosen tokens without a float32 log-softmax over the whole batch.

log p(y_t) = z_t[y_t] / T - logsumexp(z_t / T), computed chunk by chunk of rows in
float32. Under autograd each chunk is checkpointed, so the backward pass also holds only
one chunk's float32 copy at a time: with a 150k vocabulary a full float32 log-softmax of
a 512 x 1024-token batch would be 300 GB.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint


def _chunk_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    scaled = logits.float() / temperature  # [n, V]
    return scaled.gather(-1, targets[:, None]).squeeze(-1) - scaled.logsumexp(-1)  # [n]


@torch.no_grad()
def _chunk_entropy(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    logp = torch.log_softmax(logits.float() / temperature, -1)  # [n, V]
    return -(logp.exp() * logp).sum(-1)  # [n]


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0,
                   chunk_size: int = 1024, with_entropy: bool = False):
    """log softmax(logits / temperature) at targets, for logits [..., V] and targets [...].

    Returns log-probs shaped like targets (float32), and with with_entropy also the
    (detached) entropy of each position's tempered distribution.
    """
    if logits.shape[:-1] != targets.shape:
        raise ValueError(f"targets: shape {tuple(targets.shape)} does not match logits {tuple(logits.shape)}")
    if temperature <= 0:
        raise ValueError(f"temperature: must be > 0, got {temperature}")
    flat_logits = logits.reshape(-1, logits.shape[-1])  # [N, V]
    flat_targets = targets.reshape(-1)  # [N]
    pieces, entropies = [], []
    for start in range(0, flat_targets.numel(), chunk_size):
        rows, chosen = flat_logits[start:start + chunk_size], flat_targets[start:start + chunk_size]
        if rows.requires_grad:
            pieces.append(checkpoint(_chunk_logprobs, rows, chosen, temperature, use_reentrant=False))
        else:
            pieces.append(_chunk_logprobs(rows, chosen, temperature))
        if with_entropy:
            entropies.append(_chunk_entropy(rows, temperature))
    logp = torch.cat(pieces).view(targets.shape) if pieces else flat_logits.new_zeros(targets.shape, dtype=torch.float)
    if not with_entropy:
        return logp
    entropy = torch.cat(entropies).view(targets.shape) if entropies else torch.zeros_like(logp)
    return logp, entropy

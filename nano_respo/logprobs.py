"""Per-token log-probs of chosen tokens without a float32 log-softmax over the whole batch.

log p(y_t) = z_t[y_t] / T - logsumexp(z_t / T), computed chunk by chunk of rows in
float32, and a hand-written backward, d log p(y_t) / d z_t = (onehot(y_t) - softmax(z_t / T)) / T,
that writes the gradient of the logits chunk by chunk too. Between the two passes only
one float per position (its logsumexp) is kept, so the float32 buffers are one chunk
wide: with a 150k vocabulary a full float32 log-softmax of a 512 x 1024-token batch would
be 300 GB.
"""

from __future__ import annotations

import torch

CHUNK_BYTES = 16 * 2**20  # float32 working set per chunk when no chunk size is given


class ChunkedTokenLogprobs(torch.autograd.Function):
    """log softmax(logits / T)[targets] for logits [N, V]; float32 math one chunk at a time."""

    @staticmethod
    def forward(ctx, logits, targets, temperature, chunk_size):
        logp = torch.empty(len(targets), dtype=torch.float32, device=logits.device)  # [N]
        lse = torch.empty_like(logp)  # [N]
        for start in range(0, len(targets), chunk_size):
            rows = slice(start, start + chunk_size)
            scaled = logits[rows].float() / temperature  # [n, V] (a copy: never edit the logits)
            lse[rows] = scaled.logsumexp(-1)
            logp[rows] = scaled.gather(-1, targets[rows, None]).squeeze(-1) - lse[rows]
        ctx.save_for_backward(logits, targets, lse)
        ctx.temperature, ctx.chunk_size = temperature, chunk_size
        return logp

    @staticmethod
    def backward(ctx, grad_logp):  # [N]
        logits, targets, lse = ctx.saved_tensors
        grad_logits = torch.empty_like(logits)  # [N, V], in the logits' dtype
        for start in range(0, len(targets), ctx.chunk_size):
            rows = slice(start, start + ctx.chunk_size)
            g = grad_logp[rows].float() / ctx.temperature  # [n]
            softmax = (logits[rows].float() / ctx.temperature).sub_(lse[rows, None]).exp_()  # [n, V]
            grad_logits[rows] = softmax.mul_(-g[:, None]).scatter_add_(-1, targets[rows, None], g[:, None])
        return grad_logits, None, None, None


@torch.no_grad()
def _chunk_entropy(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    logp = torch.log_softmax(logits.float() / temperature, -1)  # [n, V]
    return -(logp.exp() * logp).sum(-1)  # [n]


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0,
                   chunk_size: int | None = None, with_entropy: bool = False):
    """log softmax(logits / temperature) at targets, for logits [..., V] and targets [...].

    Returns log-probs shaped like targets (float32), and with with_entropy also the
    (detached) entropy of each position's tempered distribution.
    """
    if logits.shape[:-1] != targets.shape:
        raise ValueError(f"targets: shape {tuple(targets.shape)} does not match logits {tuple(logits.shape)}")
    if temperature <= 0:
        raise ValueError(f"temperature: must be > 0, got {temperature}")
    chunk_size = chunk_size or max(1, CHUNK_BYTES // (4 * logits.shape[-1]))  # 27 rows at V = 151,936
    flat_logits = logits.reshape(-1, logits.shape[-1])  # [N, V]
    flat_targets = targets.reshape(-1)  # [N]
    logp = ChunkedTokenLogprobs.apply(flat_logits, flat_targets, temperature, chunk_size).view(targets.shape)
    if not with_entropy:
        return logp
    entropy = [_chunk_entropy(flat_logits[start:start + chunk_size], temperature)
               for start in range(0, len(flat_targets), chunk_size)]
    return logp, (torch.cat(entropy).view(targets.shape) if entropy else torch.zeros_like(logp))

"""Per-token log-probs of chosen tokens straight from the LM head's input, never building [N, V] logits.

A drop-in for rollout.policy_logprobs when the vocabulary is large (--logprob-chunk-mb):
`chunked_policy_logprobs` gives the same numbers with the same signature.

    log p(y_t) = z_t[y_t] / T - logsumexp(z_t / T),   z_t = W h_t   (W: the head, [V, H])

computed a chunk at a time: a chunk's logits exist only while it is processed, in float32.
Between forward and backward only one float per position (its logsumexp) is kept; the
backward rebuilds the logits slice by slice and applies

    d log p(y_t) / d z_t = (onehot(y_t) - softmax(z_t / T)) / T
    d/dh_t = W^T dz_t,   d/dW = sum_t dz_t h_t^T

With Qwen3's 151,936-token vocabulary the logits of one 8 x 4096-token micro-batch are
10 GB in bfloat16 and their gradient as much again; here the working set is one chunk.
The price is one more head matmul (the backward's recompute).
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from ..rollout import training_forward, unpacked
from .packed import packed_forward


# Working set of float32 logits per chunk when none is given. A GPU wants larger matmuls
# than a CPU: with too small a chunk each one re-reads the head or the hidden states for little work.
CHUNK_MB = {"cpu": 16, "cuda": 256}


class LinearTokenLogprobs(torch.autograd.Function):
    """log softmax(hidden @ weight.T / T)[targets] and the entropy, for hidden [N, H], weight [V, H].

    The forward walks over chunks of positions (a logsumexp needs a position's whole
    vocabulary); the backward over slices of the vocabulary, so that each slice of the
    head's gradient is one matmul written once in the head's dtype, as autograd would.
    """

    @staticmethod
    # Under the trainer's CUDA autocast: cast hidden states and head to bfloat16 once and run
    # both passes without autocast (it would recast the whole head for every chunk, and the
    # out= matmul of the backward is never autocast).
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.bfloat16)
    def forward(ctx, hidden, weight, targets, temperature, chunk_bytes, with_entropy):
        dtype = torch.promote_types(hidden.dtype, torch.float32)  # float32 math (float64 for float64 input)
        logp = torch.empty(len(targets), dtype=dtype, device=hidden.device)  # [N]
        lse = torch.empty_like(logp)  # [N]
        entropy = torch.full_like(logp, float("nan"))  # [N], filled only on request
        for rows in _slices(len(targets), chunk_bytes // (4 * len(weight))):
            z = (hidden[rows] @ weight.T).to(dtype).div_(temperature)  # [n, V]
            target_z = z.gather(-1, targets[rows, None]).squeeze(-1)  # [n]
            top = z.amax(-1, keepdim=True)  # [n, 1]
            z.sub_(top)  # in place: one [n, V] buffer per chunk, two with the entropy
            e = z.exp() if with_entropy else z.exp_()  # [n, V] unnormalised probabilities
            total = e.sum(-1)  # [n]
            lse[rows] = top.squeeze(-1) + total.log()
            logp[rows] = target_z - lse[rows]
            if with_entropy:  # H = log total - sum_v e_v (z_v - top) / total
                entropy[rows] = total.log() - torch.bmm(e[:, None], z[:, :, None]).view(-1) / total
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.temperature, ctx.chunk_bytes = temperature, chunk_bytes
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    @once_differentiable  # a clear error for double backward, which nothing here needs
    def backward(ctx, grad_logp, _grad_entropy):  # [N]
        hidden, weight, targets, lse = ctx.saved_tensors
        need_hidden, need_weight = ctx.needs_input_grad[:2]
        g = grad_logp.to(lse.dtype) / ctx.temperature  # [N]
        positions = torch.arange(len(targets), device=targets.device)  # [N]
        grad_hidden = torch.zeros_like(hidden, dtype=lse.dtype) if need_hidden else None  # [N, H], summed over slices
        grad_weight = torch.empty_like(weight) if need_weight else None  # [V, H]
        for cols in _slices(len(weight), ctx.chunk_bytes // (4 * max(1, len(targets)))):
            z = (hidden @ weight[cols].T).to(lse.dtype).div_(ctx.temperature)  # [N, m]
            grad_z = z.sub_(lse[:, None]).exp_().mul_(-g[:, None])  # [N, m] = -softmax * g
            hit = (targets >= cols.start) & (targets < cols.stop)  # [N] target inside this slice
            grad_z.index_put_((positions[hit], targets[hit] - cols.start), g[hit], accumulate=True)  # + onehot * g
            grad_z = grad_z.to(weight.dtype)
            if need_hidden:
                grad_hidden += grad_z @ weight[cols]  # [N, H]
            if need_weight:
                torch.mm(grad_z.T, hidden, out=grad_weight[cols])  # [m, H], straight into its rows
        return None if grad_hidden is None else grad_hidden.to(hidden.dtype), grad_weight, None, None, None, None


def _slices(n: int, size: int):
    size = max(1, size)
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


def token_logprobs(hidden: torch.Tensor, head_weight: torch.Tensor, targets: torch.Tensor,
                   temperature: float = 1.0, chunk_mb: float | None = None, with_entropy: bool = False):
    """log softmax(hidden @ head_weight.T / temperature) at targets, for hidden [..., H] and targets [...].

    chunk_mb bounds the float32 logits held at once (default CHUNK_MB by device). Returns
    float32 (float64 for float64 input) log-probs shaped like targets, and with
    with_entropy also the (detached) entropy of each position's tempered distribution.
    """
    if hidden.shape[:-1] != targets.shape:
        raise ValueError(f"targets: shape {tuple(targets.shape)} does not match hidden states {tuple(hidden.shape)}")
    if head_weight.ndim != 2 or head_weight.shape[1] != hidden.shape[-1]:
        raise ValueError(f"head_weight: expected [V, {hidden.shape[-1]}], got {tuple(head_weight.shape)}")
    if temperature <= 0:
        raise ValueError(f"temperature: must be > 0, got {temperature}")
    chunk_mb = chunk_mb or CHUNK_MB["cuda" if hidden.device.type == "cuda" else "cpu"]
    logp, entropy = LinearTokenLogprobs.apply(hidden.reshape(-1, hidden.shape[-1]), head_weight,
                                              targets.reshape(-1), temperature, int(chunk_mb * 2**20),
                                              with_entropy)  # [N], [N]
    logp, entropy = logp.view(targets.shape), entropy.view(targets.shape)
    return (logp, entropy) if with_entropy else logp


# Model types whose logits are exactly lm_head(final hidden state): nothing scales, caps or
# biases them afterwards (Granite divides by logits_scaling, Gemma 2 soft-caps, ...). Checked
# in transformers 5.24's *ForCausalLM.forward; add a type only after reading its forward too.
PLAIN_HEAD_TYPES = {"qwen3", "qwen3_moe", "qwen2", "qwen2_moe", "llama", "mistral", "mixtral"}


def linear_head(model) -> torch.nn.Linear:
    """The model's LM head, for the model types whose logits are a plain bias-free linear map of its input."""
    head = model.get_output_embeddings()
    model_type = getattr(model.config, "model_type", None)
    if model_type not in PLAIN_HEAD_TYPES or not isinstance(head, torch.nn.Linear) or head.bias is not None:
        raise ValueError(f"model: {model_type!r} ({type(model).__name__}) is not known to compute its logits as "
                         f"lm_head(h) with nothing after; token_logprobs reproduces only those "
                         f"({', '.join(sorted(PLAIN_HEAD_TYPES))})")
    return head


@contextlib.contextmanager
def head_inputs(model):
    """Collect what the model's LM head is given and hand it zero positions instead.

    The model's own forward then runs unchanged (same masks, positions, MoE routing and,
    under FSDP, the same parameter gathering) but builds empty logits; the caller feeds
    the collected hidden states and the head's weight to token_logprobs.
    """
    collected: list[torch.Tensor] = []

    def take(module, args):
        collected.append(args[0])  # [B, T, H]
        return (args[0][..., :0, :],)

    handle = linear_head(model).register_forward_pre_hook(take)
    try:
        yield collected
    finally:
        handle.remove()


def chunked_policy_logprobs(model, batch, temperature: float, with_entropy: bool = False,
                            chunk_mb: float | None = None, packed: bool = False):
    """rollout.policy_logprobs through token_logprobs: the [B, C, V] logits are never built.

    The model's own forward runs (masks, positions, MoE routing, FSDP gathering) with the
    head handed zero positions; its input and weight go to token_logprobs. packed: through
    scale.packed.packed_forward, whose head input is already the K predicting positions.
    """
    if packed:
        with head_inputs(model) as collected:
            out, targets, packing = packed_forward(model, batch)
        hidden = collected[0].reshape(len(targets), -1)  # [K, H]
    else:
        with head_inputs(model) as collected:
            out, width = training_forward(model, batch)
        hidden = collected[0]  # [B, C + 1, H] position t predicts completion token t, the last one nothing
        # All C + 1 positions, the last with a placeholder target and dropped after: the head's
        # gradient is then one matmul of the same shape as in rollout.policy_logprobs, so on the
        # tiny models both routes round alike.
        targets = F.pad(batch.input_ids[:, -width:], (0, 1))  # [B, C + 1]
    # Read the head's weight after the forward: under FSDP that is when it is gathered.
    result = token_logprobs(hidden, linear_head(model).weight, targets, temperature, chunk_mb, with_entropy)
    logp, entropy = result if with_entropy else (result, None)
    aux_loss = getattr(out, "aux_loss", None)
    if packed:
        shape = batch.completion_mask.shape
        return unpacked(logp, packing, shape), unpacked(entropy, packing, shape), aux_loss
    return logp[:, :-1], None if entropy is None else entropy[:, :-1], aux_loss

"""RL's training forward without padding (--packed-forward): rollout.policy_logprobs' drop-in.

A micro-batch's sequences are laid end to end in rows, each attending only to itself at the
sampler's positions, so the log-probs are the padded forward's up to float noise while the
matrix products run over the real tokens only (tests/step/test_less_work.py checks the equality).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch

from ..rollout import RolloutBatch, real_positions, router_outputs, tempered_logprobs, unpacked


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
    import transformers.modeling_utils

    if not hasattr(transformers.modeling_utils, "slice_logits_to_keep"):  # reads logits_to_keep as positions
        raise RuntimeError(f"--packed-forward needs transformers >= 5.22 (a boolean logits_to_keep), not "
                           f"{transformers.__version__}: upgrade it, or train without the flag")
    packing = pack(batch)
    out = model(input_ids=packing.input_ids, position_ids=packing.position_ids, logits_to_keep=packing.predicting,
                use_cache=False, **router_outputs(model))
    flat_ids = packing.input_ids.flatten()
    targets = flat_ids[packing.predicting.flatten().nonzero().squeeze(-1) + 1]  # [K] the next token of each
    if getattr(out, "router_logits", None) is not None:
        # The model averaged its load-balancing loss over the filler too; over the real tokens, as padded does.
        out.aux_loss = balance_loss(model, out.router_logits, packing.real)
    return out, targets, packing


def packed_policy_logprobs(model, batch: RolloutBatch, temperature: float, with_entropy: bool = False):
    """policy_logprobs through packed_forward (--packed-forward): no padding, 0 outside the completion mask."""
    out, targets, packing = packed_forward(model, batch)
    logp, entropy = tempered_logprobs(out.logits.view(len(targets), -1), targets, temperature, with_entropy)  # [K]
    shape = batch.completion_mask.shape
    return unpacked(logp, packing, shape), unpacked(entropy, packing, shape), getattr(out, "aux_loss", None)

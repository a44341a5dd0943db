"""What to watch every optimizer step (docs/math.md §6): starvation, the weights' tails and spread.

The statistics of one mini-batch: per advantage sign, the quantiles of the true sequence log-weight
log w = log pi / mu; the positives a sequence clip starves (w < 1 - diag_eps) and the share of the
coefficient they still receive, with their lengths (pooled and within their group); what a clip would
zero; the k3 estimate of KL(mu || pi); and the weights' effective sample share. They describe the batch,
never enter the gradient.

The loss does not compute them: policy_loss returns the coefficient phi it applied (stats["phi"]), and
the trainer calls `diagnostics` once per mini-batch with it, after the micro-batches' backward passes.
"""

from __future__ import annotations

import math

import torch

from .kernel import LossConfig, masked_sum

# The statistics `diagnostics` returns, in its order (then WEIGHT_SPREAD_KEYS, and GROUP_KEYS given a group size).
DIAGNOSTIC_KEYS = (
    "frac_pos", "frac_neg", "low_w_pos_frac", "low_w_pos_phi_mass", "phi_low_w_pos", "len_low_w_pos",
    "len_high_w_pos", "len_pos", "phi_mean_pos", "phi_mean_neg", "phi_max_neg", "clip_frac_token", "clip_frac_seq",
    "approx_kl",
    *(f"log_w_q{q}_{sign}" for sign in ("pos", "neg") for q in (10, 50, 90)),
    "lost_low_w_pos", "lost_high_w_pos", "deep_low_w_pos_frac", "deep_low_w_pos_phi_mass",
)
WEIGHT_SPREAD_KEYS = ("ess", "ess_pos", "ess_neg", "vespo_outliers")
GROUP_KEYS = ("len_excess_low_w_pos", "len_excess_high_w_pos")  # with group_size only


@torch.no_grad()
def diagnostics(phi, logp, old_logp, advantages, mask, cfg: LossConfig, group_size=None) -> dict[str, float]:
    """docs/math.md §6 statistics of one batch, as python floats (one host sync); nan where a set is empty.

    phi [B, T] is policy_loss's stats["phi"], the rest as policy_loss took them (mask bool); group_size: rows in
    contiguous groups of this size (one prompt each), read only by the within-group lengths (GROUP_KEYS)."""
    lengths = mask.sum(-1)  # [B]
    if group_size and len(lengths) % group_size:
        raise ValueError(f"group_size: {group_size} does not divide the batch's {len(lengths)} rows")
    pos, neg = (advantages > 0) & (lengths > 0), (advantages < 0) & (lengths > 0)  # [B]
    phi_seq = masked_sum(phi, mask) / lengths.clamp(min=1)  # [B] mean coefficient of a response
    d = torch.where(mask, logp.detach().to(phi.dtype) - old_logp.to(phi.dtype), torch.zeros_like(phi))  # [B, T]
    true_log_w = d.sum(-1)  # [B] always the true product, whatever the method uses
    low_w = pos & (true_log_w < math.log(1 - cfg.diag_eps))  # [B] what a sequence clip starves
    high_w = pos & (true_log_w > math.log1p(cfg.diag_eps))  # [B] the control: drift sends long ones both ways
    r, w_true = torch.exp(d.clamp(max=cfg.log_w_max)), torch.exp(true_log_w.clamp(max=cfg.log_w_max))  # [B, T], [B]
    tok_pos, tok_neg = pos[:, None] & mask, neg[:, None] & mask  # [B, T]
    tok_clipped = (tok_pos & (r > 1 + cfg.diag_eps)) | (tok_neg & (r < 1 - cfg.diag_eps))  # [B, T]
    seq_clipped = (pos & (w_true > 1 + cfg.diag_eps)) | (neg & (w_true < 1 - cfg.diag_eps))  # [B]
    nan, n_tok = phi.new_tensor(float("nan")), mask.sum().clamp(min=1)
    stats = {
        "frac_pos": pos.float().mean(),
        "frac_neg": neg.float().mean(),
        "low_w_pos_frac": low_w.sum() / pos.sum() if pos.any() else nan,
        "low_w_pos_phi_mass": phi_seq[low_w].sum() / phi_seq[pos].sum().clamp(min=1e-30) if pos.any() else nan,
        "phi_low_w_pos": phi_seq[low_w].mean() if low_w.any() else nan,  # what one starved positive gets
        "len_low_w_pos": lengths[low_w].float().mean() if low_w.any() else nan,  # are the starved ones long?
        "len_high_w_pos": lengths[high_w].float().mean() if high_w.any() else nan,  # log w sums |y| terms
        "len_pos": lengths[pos].float().mean() if pos.any() else nan,
        "phi_mean_pos": phi_seq[pos].mean() if pos.any() else nan,
        "phi_mean_neg": phi_seq[neg].mean() if neg.any() else nan,
        "phi_max_neg": phi_seq[neg].max() if neg.any() else nan,
        "clip_frac_token": (tok_clipped.sum() / (tok_pos | tok_neg).sum().clamp(min=1)),
        "clip_frac_seq": seq_clipped.sum() / (pos | neg).sum().clamp(min=1),
        "approx_kl": (torch.expm1(d.clamp(max=cfg.log_w_max)) - d)[mask].sum() / n_tok,  # k3 of KL(mu || pi)
    }
    for sign, keep in (("pos", pos), ("neg", neg)):
        qs = torch.quantile(true_log_w[keep], true_log_w.new_tensor((0.1, 0.5, 0.9))) if keep.any() else [nan] * 3
        stats.update({f"log_w_q{q}_{sign}": value for q, value in zip((10, 50, 90), qs)})
    # What a sequence clip takes per positive (each gets 1 on-policy): 1 - w below the band, all of it above.
    stats["lost_low_w_pos"] = (1 - w_true[low_w]).sum() / pos.sum() if pos.any() else nan
    stats["lost_high_w_pos"] = high_w.sum() / pos.sum() if pos.any() else nan
    deep = pos & (true_log_w < -1.0)  # [B] the paper's low tail, log W < -1 (W < 0.37)
    stats["deep_low_w_pos_frac"] = deep.sum() / pos.sum() if pos.any() else nan
    stats["deep_low_w_pos_phi_mass"] = phi_seq[deep].sum() / phi_seq[pos].sum().clamp(min=1e-30) if pos.any() else nan
    assert tuple(stats) == DIAGNOSTIC_KEYS
    stats.update({  # the spread of the weights (docs/math.md §7): effective sample share, VESPO's outlier count
        "ess": effective_sample_share(true_log_w[lengths > 0]), "ess_pos": effective_sample_share(true_log_w[pos]),
        "ess_neg": effective_sample_share(true_log_w[neg]), "vespo_outliers": (neg & (true_log_w > math.log(100.0))).sum()})
    if group_size:  # one prompt per group, so one target: a tail's length with which target it answers taken out
        excess = length_excess_in_group(lengths, pos, group_size)  # [B]
        stats.update({"len_excess_low_w_pos": excess[low_w].mean() if low_w.any() else nan,
                      "len_excess_high_w_pos": excess[high_w].mean() if high_w.any() else nan})
    values = torch.stack([v.float().reshape(()) for v in stats.values()]).tolist()
    return dict(zip(stats, values))


def effective_sample_share(log_w: torch.Tensor) -> torch.Tensor:
    """(sum w)^2 / (n sum w^2) in (0, 1], in log space: 1 when every w is equal. docs/math.md §7."""
    if not len(log_w):
        return log_w.new_tensor(float("nan"))
    return torch.exp(2 * torch.logsumexp(log_w, 0) - math.log(len(log_w)) - torch.logsumexp(2 * log_w, 0))


def length_excess_in_group(lengths: torch.Tensor, positive: torch.Tensor, group_size: int) -> torch.Tensor:
    """[B] each response's length minus the mean length of the positives of its group (read on positives only)."""
    grouped, pos = lengths.float().view(-1, group_size), positive.view(-1, group_size)  # [G, group_size]
    mean_pos = (grouped * pos).sum(-1, keepdim=True) / pos.sum(-1, keepdim=True).clamp(min=1)  # [G, 1]
    return (grouped - mean_pos).view(-1)  # [B]

"""deeper/tiny_qwen3_records' exercise checks accept the right answer and reject wrong ones, with a hint that holds no answer.

The batch is synthetic (random token log-probs under pi and mu, ragged masks, group advantages),
so the test needs no model; the checks grade against it exactly as they grade the notebook's batch.
"""

import math
import re

import torch

from nano_respo.kernel import LossConfig
from test_exercises import checks  # notebooks/checks.py, loaded with the course module it imports


def synthetic_batch(seed=0, groups=4, group_size=8, width=12):
    """(logp, old_logp, mask, advantages) of a drifted batch: rewards 0/1, advantages centred per group."""
    gen = torch.Generator().manual_seed(seed)
    n = groups * group_size
    old_logp = -torch.rand(n, width, generator=gen, dtype=torch.float64) * 2
    logp = old_logp + 0.15 * torch.randn(n, width, generator=gen, dtype=torch.float64)
    lengths = torch.randint(3, width + 1, (n,), generator=gen)
    mask = torch.arange(width)[None] < lengths[:, None]
    logp = torch.where(mask, logp, torch.zeros_like(logp) + 5.0)      # padding that would show if summed
    rewards = (torch.rand(n, generator=gen) < 0.5).double()
    rewards[:group_size] = torch.tensor([1, 1, 1, 0, 0, 0, 0, 0], dtype=torch.float64)   # a group with signal
    adv = rewards - rewards.view(groups, group_size).mean(1).repeat_interleave(group_size)
    return logp, old_logp, mask, adv


def graded(check, *args, capsys):
    """(accepted, the hint it printed, '' when accepted) of one call of a check."""
    accepted = check(*args)
    out = capsys.readouterr().out
    assert out.startswith("✓ right") if accepted else ("✗ not yet" in out and "Hint:" in out)
    return accepted, out.split("Hint:", 1)[1] if "Hint:" in out else ""


# --- Exercise 1: the highest-w negative -------------------------------------------------

def test_high_w_negative_check_accepts_the_argmax_and_its_copies(capsys):
    logp, old_logp, mask, adv = synthetic_batch()
    log_w = torch.where(mask, logp - old_logp, torch.zeros_like(logp)).sum(-1)
    truth = int(torch.where(adv < 0, log_w, torch.full_like(log_w, -math.inf)).argmax())
    assert graded(checks.check_high_w_negative, truth, log_w, adv, capsys=capsys)[0]
    copy = next(i for i in range(len(adv)) if adv[i] < 0 and i != truth)
    tied = log_w.clone()
    tied[copy] = tied[truth]                                          # a copy of the same response ties
    assert graded(checks.check_high_w_negative, copy, tied, adv, capsys=capsys)[0]


def test_high_w_negative_check_rejects_wrong_rows_without_naming_the_right_one(capsys):
    logp, old_logp, mask, adv = synthetic_batch()
    log_w = torch.where(mask, logp - old_logp, torch.zeros_like(logp)).sum(-1)
    log_w[0] = 10.0                                                   # a positive above every negative
    truth = int(torch.where(adv < 0, log_w, torch.full_like(log_w, -math.inf)).argmax())
    lower_negative = int(torch.where(adv < 0, log_w, torch.full_like(log_w, math.inf)).argmin())
    highest_overall = int(log_w.argmax())
    assert adv[highest_overall] > 0
    for wrong in (lower_negative, highest_overall, None, -1, len(adv), str(truth), float(truth), True):
        accepted, hint = graded(checks.check_high_w_negative, wrong, log_w, adv, capsys=capsys)
        assert not accepted, f"the check accepted a wrong answer: {wrong!r}"
        assert str(truth) not in re.findall(r"\d+", hint), f"the hint names the answer: {hint}"


# --- Exercise 2: a coefficient by hand --------------------------------------------------

def coefficient_right(logp, old_logp, mask, advantage, method):
    log_w = ((logp - old_logp) * mask).sum().item()
    w = math.exp(log_w)
    if method == "seq_clip":
        inside = w <= 1.2 if advantage > 0 else w >= 0.8
        return w if inside else 0.0
    phi_0 = respo_power_mean(w, advantage)
    lam = LossConfig().lambda_pos if advantage > 0 else LossConfig().lambda_neg
    return phi_0 * math.exp(lam * (1 - phi_0))


def respo_power_mean(w, advantage):
    """The published kernel's phi_0 = [(1 - beta) + beta w^(alpha - 1)]^(1 / (alpha - 1)), w^beta at alpha = 1."""
    cfg = LossConfig()
    alpha, beta = (cfg.alpha_pos, cfg.beta_pos) if advantage > 0 else (cfg.alpha_neg, cfg.beta_neg)
    if alpha == 1:
        return w ** beta
    return ((1 - beta) + beta * w ** (alpha - 1)) ** (1 / (alpha - 1))


def swap_branches(logp, old_logp, mask, advantage, method):
    return coefficient_right(logp, old_logp, mask, -advantage, method)


def unmasked(logp, old_logp, mask, advantage, method):
    return coefficient_right(logp, old_logp, torch.ones_like(mask), advantage, method)


def length_normalised(logp, old_logp, mask, advantage, method):
    n = mask.sum()
    return coefficient_right(logp / n, old_logp / n, mask, advantage, method)


def clip_without_the_band(logp, old_logp, mask, advantage, method):
    w = math.exp(((logp - old_logp) * mask).sum().item())
    return w if method == "seq_clip" else coefficient_right(logp, old_logp, mask, advantage, method)


def clip_clamps(logp, old_logp, mask, advantage, method):
    """PPO's clipped ratio's value, not its coefficient: a classic slip."""
    w = math.exp(((logp - old_logp) * mask).sum().item())
    return min(max(w, 0.8), 1.2) if method == "seq_clip" else coefficient_right(logp, old_logp, mask, advantage, method)


def respo_untilted(logp, old_logp, mask, advantage, method):
    if method != "respo":
        return coefficient_right(logp, old_logp, mask, advantage, method)
    return respo_power_mean(math.exp(((logp - old_logp) * mask).sum().item()), advantage)


def raises(*args):
    raise NotImplementedError


COEFFICIENT_WRONG = {"branches swapped": swap_branches, "padding summed": unmasked,
                     "length-normalised log w": length_normalised, "the clip without its band": clip_without_the_band,
                     "the clipped ratio's value": clip_clamps, "ReSPO without its tilts": respo_untilted,
                     "a stub": lambda *args: None, "raises": raises}


def test_coefficient_check_accepts_a_hand_computation(capsys):
    for seed in (0, 1):
        assert graded(checks.check_coefficient_by_hand, coefficient_right, *synthetic_batch(seed), capsys=capsys)[0]
    as_float32 = [t.float() if t.is_floating_point() else t for t in synthetic_batch(2)]   # the notebook's dtype
    assert graded(checks.check_coefficient_by_hand, coefficient_right, *as_float32, capsys=capsys)[0]


def test_coefficient_check_rejects_each_slip(capsys):
    batch = synthetic_batch()
    for name, wrong in COEFFICIENT_WRONG.items():
        accepted, hint = graded(checks.check_coefficient_by_hand, wrong, *batch, capsys=capsys)
        assert not accepted, f"the check accepted a wrong answer: {name}"
        assert "exp(" not in hint and "**" not in hint, f"the hint writes the formula out: {hint}"


def test_coefficient_rows_cross_the_clip_band_for_both_signs():
    """The graded rows include w on both sides of [0.8, 1.2] for positives and negatives alike."""
    logp, old_logp, mask, adv = synthetic_batch()
    rows = checks.coefficient_rows(logp, old_logp, mask, adv)
    for sign in (True, False):
        ws = [math.exp(((lp - old) * m).sum().item()) for lp, old, m, a in rows if (a > 0) == sign]
        assert min(ws) < 0.8 and max(ws) > 1.2 and any(0.8 < w < 1.2 for w in ws)

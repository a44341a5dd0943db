"""ReSPO and its baselines as one pure-tensor policy loss, in the order of docs/math.md (each function names its §).

Every method is a *coefficient* phi on the plain policy gradient (§1): for responses y_i ~ mu (the behaviour policy
that sampled them) with advantages A_i, grad J = mean_i phi_i * A_i * grad log pi_theta(y_i | x), implemented as
loss = -agg(stopgrad(phi) * A * log pi_theta). ReSPO (§3; Chen, Ban and Hsieh, arXiv:2609.35433) replaces the clip
with a smooth kernel on the sequence weight W = pi_theta(y|x) / mu(y|x), one branch per sign of the advantage, each
a power mean of 1 and W followed by an exponential tilt:

    phi_0(W) = [(1 - beta) + beta * W**(alpha - 1)]**(1 / (alpha - 1))      (W**beta at alpha = 1)
    phi(W)   = phi_0(W) * exp(lambda * (1 - phi_0(W)))

The published constants, (alpha, beta, lambda) = (2, 1/2, 2) for A > 0 and (1, 1/2, 2) for A <= 0, give
    phi_+(W) = (1 + W) / 2 * exp(1 - W)          largest at W = 0 (e/2): an under-generated positive keeps its push
    phi_-(W) = sqrt(W) * exp(2 * (1 - sqrt(W)))  peak e/2 at W = 1/4, 0 at both ends: over-generated negatives fade

Left out: KL-to-reference penalties, entropy bonuses, value functions and any distributed reduction (a caller that
shards a batch reduces the loss itself). The loss *value* is no progress signal, only its gradient. Last (§6),
the statistics a trainer logs of each batch (`diagnostics`), which never enter the gradient.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
SCALES = ("none", "std")


@dataclass(frozen=True)
class LossConfig:
    """Every knob of every method; None takes the method's published default. Frozen, checked when built."""
    method: str = "respo"
    """Policy-loss coefficient; respo, or a baseline to compare with (docs/math.md §5)."""
    alpha_pos: float = 2.0
    """ReSPO positive branch: order alpha_+ of the power mean phi_0 (2: the arithmetic mean (1 - beta) + beta W)."""
    beta_pos: float = 0.5
    """beta_+, the weight of W in ReSPO's positive power mean; in [0, 1], 1 - beta_+ on 1."""
    lambda_pos: float = 2.0
    """ReSPO positive branch: tilt lambda_+ >= 0; at alpha_+ > 1, lambda_+ >= (1 - beta_+)**(-1 / (alpha_+ - 1)) makes W = 0 its maximum (docs/math.md §4.4)."""
    alpha_neg: float = 1.0
    """ReSPO negative branch: order alpha_- of the power mean phi_0 (1: the geometric mean W**beta)."""
    beta_neg: float = 0.5
    """ReSPO negative branch: weight beta_- in [0, 1] of W in the power mean."""
    lambda_neg: float = 2.0
    """ReSPO negative branch: tilt lambda_- >= 0; > 0 sends the weight of high-W negatives to 0."""
    eps_low: float | None = None
    """Lower clip range (ratio >= 1 - eps_low) of the clipped methods; None = the method's own: 0.2, gspo 3e-4."""
    eps_high: float | None = None
    """Upper clip range (ratio <= 1 + eps_high); None = the method's own: 0.2, dapo and cispo 0.28, gspo 4e-4."""
    dual_clip_c: float = 3.0
    """dual_clip: negatives with ratio above c get zero gradient (c > 1)."""
    sapo_tau_pos: float = 1.0
    """sapo: gate temperature for A > 0."""
    sapo_tau_neg: float = 1.05
    """sapo: gate temperature for A < 0."""
    vespo_k_pos: float = 2.0
    """vespo: power k for A >= 0."""
    vespo_lambda_pos: float = 3.0
    """vespo: tilt lambda for A >= 0."""
    vespo_k_neg: float = 3.0
    """vespo: power k for A < 0."""
    vespo_lambda_neg: float = 2.0
    """vespo: tilt lambda for A < 0."""
    agg: str = "token-mean"
    """How per-token terms become one loss (verl's names): token-mean as the paper; seq-mean-token-sum is the exact sequence gradient."""
    norm_len: int | None = None
    """Constant divisor of seq-mean-token-sum-norm; None = the padded length T of the batch."""
    length_norm: bool | None = None
    """Use the length-normalised log-weight s / |y| (GSPO-style); None = the method's own (on for gspo only)."""
    diag_eps: float = 0.2
    """Clip range the diagnostics measure against (low-w threshold 1 - diag_eps, clip shares)."""
    log_w_max: float = 20.0
    """Numerical guard: exp() never sees a log-weight or log-coefficient above this; respo clamps log W to +-this."""
    weight_against: str = "sampler"
    """W against sampler (ours) or pi_old (the authors'); sampler: w = pi / mu, pi_old is the learner at the start of the batch's updates, and --correction then folds log c into log W (docs/math.md §7)."""
    correction: str = "none"
    """Decoupled form (docs/math.md §7): weight pi_old/mu by token-/sequence- truncate or mask, trust region on pi/pi_old."""
    correction_min: float | None = None
    """Correction's lower bound C_min on pi_old/mu; None = none (TRL's and verl's default)."""
    correction_max: float | None = None
    """Correction's upper bound C_max on pi_old/mu; None = 2 for token-truncate (verl), else 3 (TRL)."""
    opsm_delta: float | None = None
    """DeepSeek-V3.2's off-policy sequence mask: drop negatives whose mean log(mu/pi) per token exceeds this."""

    def __post_init__(self):
        # METHOD_TABLE itself, read now (not a tuple frozen at import): a row registered later by name is accepted.
        choices = {"method": METHOD_TABLE, "agg": AGG_MODES, "correction": CORRECTIONS,
                   "weight_against": WEIGHT_AGAINST}
        non_negative = ("lambda_pos", "lambda_neg", "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg",
                        "vespo_lambda_neg", "sapo_tau_pos", "sapo_tau_neg", "eps_low", "eps_high", "diag_eps",
                        "opsm_delta")
        for name, value in ((f.name, getattr(self, f.name)) for f in fields(self)):
            if name in choices and value not in choices[name]:
                raise ValueError(f"{name}: unknown {name} {value!r}; choose one of {', '.join(choices[name])}")
            need = ("be finite" if isinstance(value, float) and not math.isfinite(value) else
                    "lie in [0, 1]" if name in ("beta_pos", "beta_neg") and not 0 <= value <= 1 else
                    "be >= 0" if name in non_negative and value is not None and value < 0 else
                    "be > 1" if name == "dual_clip_c" and value <= 1 else
                    "be >= 1" if name == "norm_len" and value is not None and value < 1 else
                    "be > 0" if name == "log_w_max" and value <= 0 else None)
            if need:
                raise ValueError(f"{name}: must {need}, got {value}")
        low, high = correction_bounds(self)
        if not 0 <= low < high:
            raise ValueError(f"correction_min, correction_max: need 0 <= C_min < C_max, got {low} and {high}")


# --- docs/math.md §1: the sequence log-weight -----------------------------------------

def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """float32 at least (bf16 log-ratios summed over a long response lose the weight), float64 kept."""
    return torch.promote_types(x.dtype, torch.float32)


def masked_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Row sums over the response tokens; padding may hold anything, even inf."""
    return torch.where(mask, x, torch.zeros_like(x)).sum(-1)  # [B]


def sequence_log_weight(logp, old_logp, mask, length_norm: bool = False) -> torch.Tensor:
    """s = sum_t m_t (log pi - log mu), the log of w = pi(y|x) / mu(y|x) (/ |y| if length_norm). docs/math.md §1."""
    dtype = compute_dtype(logp)
    s = masked_sum(logp.detach().to(dtype) - old_logp.to(dtype), mask.bool())  # [B]
    if length_norm:
        s = s / mask.sum(-1).clamp(min=1)  # [B]
    return s


# --- docs/math.md §3: the ReSPO kernel -------------------------------------------------

def power_mean_log(log_w: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
    """log phi_0(W) in log space (logaddexp): finite for every finite log W and every order. docs/math.md §3, §4.2."""
    if alpha == 1.0:
        return beta * log_w  # [B]
    order = alpha - 1.0
    on_one = torch.full_like(log_w, math.log(1.0 - beta) if beta < 1 else -math.inf)  # log (1 - beta)
    on_w = (math.log(beta) if beta > 0 else -math.inf) + order * log_w  # log (beta W**order)
    return torch.logaddexp(on_one, on_w) / order  # [B]


def respo_branch(log_w: torch.Tensor, alpha: float, beta: float, lam: float, log_w_max: float = 20.0) -> torch.Tensor:
    """phi(W) = phi_0(W) exp(lam (1 - phi_0(W))), log W clamped to [-log_w_max, log_w_max]. docs/math.md §3, §4.3."""
    log_phi0 = power_mean_log(log_w.clamp(-log_w_max, log_w_max), alpha, beta)  # [B]
    return torch.exp(log_phi0 - lam * torch.expm1(log_phi0))  # [B]; log phi0 <= log_w_max, so no overflow


def respo_coefficient(log_w: torch.Tensor, positive: torch.Tensor, alpha_pos: float = 2.0, beta_pos: float = 0.5,
                      lambda_pos: float = 2.0, alpha_neg: float = 1.0, beta_neg: float = 0.5, lambda_neg: float = 2.0,
                      log_w_max: float = 20.0) -> torch.Tensor:
    """phi_+(W) where the advantage is positive, phi_-(W) elsewhere; the defaults are the published constants. §3."""
    return torch.where(positive,
                       respo_branch(log_w, alpha_pos, beta_pos, lambda_pos, log_w_max),
                       respo_branch(log_w, alpha_neg, beta_neg, lambda_neg, log_w_max))


# --- docs/math.md §5 and §8: the baselines, as coefficients of the same shape -----------
# Each maps (log-ratio, positive, cfg, eps) to the coefficient phi of the log-ratio's shape: per token [B, T]
# or per sequence [B], as METHOD_TABLE says.

def respo_method_coefficient(log_w, positive, cfg, eps):
    """ReSPO's kernel (§3) with cfg's constants."""
    return respo_coefficient(log_w, positive, cfg.alpha_pos, cfg.beta_pos, cfg.lambda_pos,
                             cfg.alpha_neg, cfg.beta_neg, cfg.lambda_neg, cfg.log_w_max)


def clip_coefficient(log_r, positive, cfg, eps):
    """PPO's min(r A, clip(r) A): r inside the trust region, 0 where the clip is active."""
    r = torch.exp(log_r.clamp(max=cfg.log_w_max))
    clipped = torch.where(positive, r > 1 + eps[1], r < 1 - eps[0])
    return torch.where(clipped, torch.zeros_like(r), r)


def dual_clip_coefficient(log_r, positive, cfg, eps):
    """PPO clip plus a floor c A on negatives: a negative's ratio above c gets 0."""
    phi = clip_coefficient(log_r, positive, cfg, eps)
    return torch.where(~positive & (log_r > math.log(cfg.dual_clip_c)), torch.zeros_like(phi), phi)


def cispo_coefficient(log_r, positive, cfg, eps):
    """CISPO: stopgrad(min(r, 1 + eps_high)) on every token, no token is dropped."""
    return torch.exp(log_r.clamp(max=math.log1p(eps[1])))


def sapo_coefficient(log_r, positive, cfg, eps):
    """SAPO's soft gate (4/tau) sigmoid(tau (r - 1)) has gradient r sech^2(tau (r - 1) / 2)."""
    r = torch.exp(log_r.clamp(max=cfg.log_w_max))
    tau = torch.where(positive, cfg.sapo_tau_pos, cfg.sapo_tau_neg)
    return r / torch.cosh(tau * (r - 1) / 2) ** 2


def power_tilt(log_w: torch.Tensor, alpha: float, lam: float, log_w_max: float = 20.0) -> torch.Tensor:
    """VESPO's family w**alpha * exp(-lam (w - 1)) (docs/math.md §8), in log space and capped at log_w_max."""
    log_phi = alpha * log_w - lam * torch.expm1(log_w.clamp(max=log_w_max))
    return torch.exp(log_phi.clamp(max=log_w_max))


def vespo_coefficient(log_w, positive, cfg, eps):
    """VESPO: the family with (k, lambda) of each sign, powers k >= 2. docs/math.md §8."""
    return torch.where(positive, power_tilt(log_w, cfg.vespo_k_pos, cfg.vespo_lambda_pos, cfg.log_w_max),
                       power_tilt(log_w, cfg.vespo_k_neg, cfg.vespo_lambda_neg, cfg.log_w_max))


def topr_coefficient(log_w, positive, cfg, eps):
    """TOPR: 1 on positives, truncated IS min(w, 1) on negatives."""
    return torch.where(positive, torch.ones_like(log_w), torch.exp(log_w.clamp(max=0.0)))


def is_coefficient(log_w, positive, cfg, eps):
    return torch.exp(log_w.clamp(max=cfg.log_w_max))


def no_is_coefficient(log_w, positive, cfg, eps):
    return torch.ones_like(log_w)


TOKEN, SEQUENCE = "token", "sequence"
METHOD_TABLE = {
    # method:              (ratio level, coefficient,                    (eps_low, eps_high), length_norm)
    "respo":               (SEQUENCE, respo_method_coefficient,        (0.2, 0.2),   False),
    "grpo":                (TOKEN,    clip_coefficient,                (0.2, 0.2),   False),
    "dapo":                (TOKEN,    clip_coefficient,                (0.2, 0.28),  False),
    "dual_clip":           (TOKEN,    dual_clip_coefficient,           (0.2, 0.2),   False),
    "seq_clip":            (SEQUENCE, clip_coefficient,                (0.2, 0.2),   False),
    "gspo":                (SEQUENCE, clip_coefficient,                (3e-4, 4e-4), True),
    "cispo":               (TOKEN,    cispo_coefficient,               (0.2, 0.28),  False),
    "sapo":                (TOKEN,    sapo_coefficient,                (0.2, 0.2),   False),
    "vespo":               (SEQUENCE, vespo_coefficient,               (0.2, 0.2),   False),
    "topr":                (SEQUENCE, topr_coefficient,                (0.2, 0.2),   False),
    "is":                  (SEQUENCE, is_coefficient,                  (0.2, 0.2),   False),
    "no_is":               (SEQUENCE, no_is_coefficient,               (0.2, 0.2),   False),
}
METHODS = tuple(METHOD_TABLE)  # the rows defined here; more may be registered by name (LossConfig reads the table)


def coefficients(logp, old_logp, advantages, mask, cfg):
    """The coupled form: per-token coefficient phi [B, T] (sequence methods broadcast theirs), log-weight s [B]."""
    level, coefficient, (eps_low, eps_high), length_norm = METHOD_TABLE[cfg.method]
    eps = (eps_low if cfg.eps_low is None else cfg.eps_low,  # None: the method's own clip range
           eps_high if cfg.eps_high is None else cfg.eps_high)
    length_norm = length_norm if cfg.length_norm is None else cfg.length_norm
    positive = advantages > 0  # [B]
    log_w = sequence_log_weight(logp, old_logp, mask, length_norm)  # [B]
    if level == SEQUENCE:
        phi = coefficient(log_w, positive, cfg, eps)[:, None].expand_as(logp)  # [B, T]
    else:
        log_r = torch.where(mask, logp.detach() - old_logp, torch.zeros_like(logp)).to(log_w.dtype)  # [B, T]
        phi = coefficient(log_r, positive[:, None].expand_as(log_r), cfg, eps)  # [B, T]
    return phi, log_w


# --- docs/math.md §7: three policies, the decoupled form -------------------------------
# mu sampled the batch, pi_old is the learner at the start of the updates on it, pi the learner now. The
# decoupled form splits w = pi / mu into (pi / pi_old) * (pi_old / mu): the method's trust region on the
# first factor, a correction weight c on the second (TRL's vllm_importance_sampling_mode, verl's rollout_is).

CORRECTIONS = ("none", "token-truncate", "token-mask", "sequence-truncate", "sequence-mask")
WEIGHT_AGAINST = ("sampler", "pi_old")  # W's denominator: mu, or pi_old (verl's W, a correction folded into log W)
FOLD_FLOOR = 1e-8  # a masked token's weight 0 enters log W as log 1e-8, as the authors' loss clamps it


def correction_bounds(cfg: LossConfig) -> tuple[float, float]:
    """[C_min, C_max]: LossConfig's, or none below and verl's 2 (token-truncate) or TRL's 3 (otherwise) above."""
    default_max = 2.0 if cfg.correction == "token-truncate" else 3.0
    return (cfg.correction_min or 0.0, default_max if cfg.correction_max is None else cfg.correction_max)


def correction_log_ratio(pi_old_logp, old_logp, mask, level: str) -> torch.Tensor:
    """log rho = log pi_old - log mu, per token [B, T] (0 on padding) or summed per sequence [B]. docs/math.md §7."""
    dtype = compute_dtype(pi_old_logp)
    log_rho = torch.where(mask, pi_old_logp.to(dtype) - old_logp.to(dtype), torch.zeros((), dtype=dtype))  # [B, T]
    return log_rho.sum(-1) if level == SEQUENCE else log_rho


def outside_bounds(log_rho: torch.Tensor, cfg: LossConfig) -> torch.Tensor:
    """rho < C_min or rho > C_max, compared in log space: what a mask drops and a truncation clamps."""
    low, high = correction_bounds(cfg)
    return (log_rho < (math.log(low) if low > 0 else -math.inf)) | (log_rho > math.log(high))


def correction_weight(pi_old_logp, old_logp, mask, cfg: LossConfig) -> torch.Tensor:
    """c [B, T]: truncate clamp(rho, C_min, C_max), mask rho * 1[C_min <= rho <= C_max], as TRL and verl. §7."""
    level, bound = cfg.correction.split("-")
    log_rho = correction_log_ratio(pi_old_logp, old_logp, mask, level)  # [B, T] or [B]
    low, high = correction_bounds(cfg)
    log_high = min(math.log(high), cfg.log_w_max)
    c = (torch.exp(log_rho.clamp(min=math.log(low) if low > 0 else None, max=log_high)) if bound == "truncate" else
         torch.where(outside_bounds(log_rho, cfg), torch.zeros_like(log_rho), torch.exp(log_rho.clamp(max=log_high))))
    return c[:, None].expand_as(pi_old_logp) if level == SEQUENCE else c  # [B, T]


def off_policy_sequence_mask(logp, old_logp, advantages, mask, delta: float) -> torch.Tensor:
    """DeepSeek-V3.2's mask [B]: 0 on a negative whose mean per-token log(mu / pi) exceeds delta, as TRL's. §7."""
    dtype = compute_dtype(logp)
    kl = masked_sum(old_logp.to(dtype) - logp.detach().to(dtype), mask) / mask.sum(-1).clamp(min=1)  # [B]
    return (~((advantages < 0) & (kl > delta))).to(dtype)


def decoupled_coefficients(logp, old_logp, advantages, mask, cfg, pi_old_logp) -> tuple[torch.Tensor, torch.Tensor]:
    """(phi [B, T], log-weight [B]) of the decoupled form: the trust region on pi / pi_old times c. docs/math.md §7."""
    phi, log_w = coefficients(logp, pi_old_logp, advantages, mask, cfg)  # [B, T] trust region on pi / pi_old
    return phi * correction_weight(pi_old_logp, old_logp, mask, cfg), log_w  # [B, T], [B]


def against_pi_old(logp, old_logp, advantages, mask, cfg, pi_old_logp) -> tuple[torch.Tensor, torch.Tensor]:
    """(phi [B, T], log-weight [B]) of W = pi / pi_old (verl's W, docs/math.md §7); with a correction, log c of each
    token is added to its log-ratio, so a sequence method reads log W = log(pi / pi_old) + sum_t log c_t."""
    if cfg.correction == "none":
        return coefficients(logp, pi_old_logp, advantages, mask, cfg)
    log_c = correction_weight(pi_old_logp, old_logp, mask, cfg).clamp(min=FOLD_FLOOR).log()  # [B, T]
    return coefficients(logp, pi_old_logp.to(log_c.dtype) - log_c, advantages, mask, cfg)


# --- Aggregation (verl's loss_agg_mode names) ----------------------------------------

def loss_denominator(mask: torch.Tensor, mode: str, norm_len: int | None = None) -> torch.Tensor:
    """What `aggregate` divides by: tokens (token-mean) or non-empty responses (x norm_len). docs/math.md §1."""
    lengths = mask.sum(-1)  # [B]
    if mode == "token-mean":
        return lengths.sum()
    n_seq = (lengths > 0).sum()
    return n_seq * (norm_len or mask.shape[-1]) if mode == "seq-mean-token-sum-norm" else n_seq


def aggregate(terms: torch.Tensor, mask: torch.Tensor, mode: str, norm_len: int | None = None) -> torch.Tensor:
    """Reduce per-token terms [B, T] to a scalar; empty responses count as no sequence. docs/math.md §1."""
    terms = torch.where(mask, terms, torch.zeros_like(terms))  # [B, T]
    total = (terms.sum(-1) / mask.sum(-1).clamp(min=1)).sum() if mode == "seq-mean-token-mean" else terms.sum()
    return total / loss_denominator(mask, mode, norm_len).clamp(min=1)


# --- The loss ------------------------------------------------------------------------

def check_inputs(logp, old_logp, advantages, mask, cfg, pi_old_logp):
    """Shapes as policy_loss names them, finite values where they count, pi_old where cfg reads it; the mask as bool."""
    if logp.dim() != 2:
        raise ValueError(f"logp: expected shape [B, T], got {tuple(logp.shape)}")
    for name, t, shape in (("old_logp", old_logp, logp.shape), ("mask", mask, logp.shape),
                           ("advantages", advantages, logp.shape[:1])):
        if t.shape != shape:
            raise ValueError(f"{name}: expected shape {list(shape)} (logp's {list(logp.shape)}), got {list(t.shape)}")
    mask = mask.bool()
    for name, t in (("logp", logp.detach()), ("old_logp", old_logp)):
        if not torch.where(mask, t, torch.zeros_like(t)).isfinite().all():
            raise ValueError(f"{name}: NaN or inf at a response token (mask = 1)")
    if not advantages.isfinite().all():
        raise ValueError("advantages: NaN or inf")
    needed_by = ("weight_against 'pi_old'" if cfg.weight_against == "pi_old" else
                 f"correction {cfg.correction!r}" if cfg.correction != "none" else None)
    if needed_by and (pi_old_logp is None or pi_old_logp.shape != logp.shape):
        got = "none" if pi_old_logp is None else f"shape {tuple(pi_old_logp.shape)}"
        raise ValueError(f"pi_old_logp: {needed_by} needs the learner's log-probs {tuple(logp.shape)} of the batch, "
                         f"recomputed at the start of its updates (train.rl_iteration fills them); got {got}")
    return mask


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                cfg: LossConfig, pi_old_logp: torch.Tensor | None = None):
    """loss = -agg(stopgrad(phi) * A * log pi_theta); returns (loss, stats).

    logp:       [B, T] per-token log-probs under the current policy (requires grad)
    old_logp:   [B, T] per-token log-probs under the behaviour policy mu (the sampler)
    advantages: [B]    one advantage per response
    mask:       [B, T] 1 on response tokens, 0 on padding
    cfg:        the method and its knobs, LossConfig() for ReSPO's defaults
    pi_old_logp: [B, T] the learner's log-probs recomputed at the start of the updates on this batch; only the
                decoupled form (cfg.correction) and cfg.weight_against "pi_old" read it (docs/math.md §7)
    stats:      detached, no host sync: "phi" [B, T] the coefficient as applied (after any correction and mask),
                "log_w" [B] the log-weight the method read (log pi / mu, or log pi / pi_old plus any folded log c, as
                cfg says; / |y| if normalised). docs/math.md §6's statistics: `diagnostics` below.
    """
    mask = check_inputs(logp, old_logp, advantages, mask, cfg, pi_old_logp)
    if cfg.weight_against == "pi_old":  # verl's W = pi / pi_old, any correction folded into it
        phi, log_w = against_pi_old(logp, old_logp, advantages, mask, cfg, pi_old_logp)  # [B, T], [B]
    elif cfg.correction == "none":  # the coupled form: the method's coefficient of w = pi / mu
        phi, log_w = coefficients(logp, old_logp, advantages, mask, cfg)  # [B, T], [B]
    else:  # the decoupled form, docs/math.md §7
        phi, log_w = decoupled_coefficients(logp, old_logp, advantages, mask, cfg, pi_old_logp)  # [B, T], [B]
    if cfg.opsm_delta is not None:  # DeepSeek-V3.2 drops the negatives far off policy, docs/math.md §7
        phi = phi * off_policy_sequence_mask(logp, old_logp, advantages, mask, cfg.opsm_delta)[:, None]  # [B, T]
    dtype = compute_dtype(logp)
    terms = -(phi * advantages.to(dtype)[:, None]).detach() * logp.to(dtype)  # [B, T]
    return aggregate(terms, mask, cfg.agg, cfg.norm_len), {"phi": phi.detach(), "log_w": log_w.detach()}


# --- docs/math.md §1: groups, advantages and reuse -------------------------------------

def group_advantages(rewards: torch.Tensor, group_size: int, scale: str = "none"):
    """(A [N], stats): A_i = r_i - mean of its (contiguous) group, / (std + 1e-6) if scale = std. docs/math.md §1."""
    if scale not in SCALES:
        raise ValueError(f"scale: unknown scale {scale!r}; choose one of {', '.join(SCALES)}")
    if group_size < 1 or rewards.dim() != 1 or rewards.numel() % group_size:
        raise ValueError(f"group_size: {group_size} does not divide the {tuple(rewards.shape)} rewards")
    if not rewards.isfinite().all():
        raise ValueError("rewards: NaN or inf")
    grouped = rewards.float().view(-1, group_size)  # [G, group_size]
    adv = grouped - grouped.mean(-1, keepdim=True)
    zero_var = (grouped == grouped[:, :1]).all(-1)  # [G] all rewards equal: no learning signal
    if scale == "std" and group_size > 1:
        adv = adv / (grouped.std(-1, keepdim=True) + 1e-6)
    adv = torch.where(zero_var[:, None], torch.zeros_like(adv), adv)
    return adv.view(-1), {"zero_var_groups": int(zero_var.sum()), "zero_var_frac": zero_var.float().mean().item()}


def reuse_split(reuse: int, epochs: int | None = None, minibatches: int | None = None) -> tuple[int, int]:
    """R optimizer steps on one rollout batch as (epochs, mini-batches per epoch); the count given is capped at R."""
    if (epochs is None) == (minibatches is None):
        raise ValueError("reuse: give the number of epochs or of mini-batches per epoch, not both")
    given = min(reuse, epochs or minibatches)
    if reuse < 1 or reuse % given:
        raise ValueError(f"reuse: {reuse} optimizer steps do not split into "
                         f"{given} {'epochs' if epochs else 'mini-batches'}")
    return (given, reuse // given) if epochs else (reuse // given, given)


def minibatch_order(n_groups: int, group_size: int, minibatches: int, generator: torch.Generator):
    """One epoch: whole groups in a fresh random order, cut into mini-batches of episode rows (M x [rows])."""
    groups = torch.randperm(n_groups, generator=generator).view(minibatches, -1)  # [M, groups per mini-batch]
    return list((groups[:, :, None] * group_size + torch.arange(group_size)).flatten(1))


# --- docs/math.md §6: what is logged every step ----------------------------------------
# The statistics of one mini-batch: per advantage sign, the quantiles of the true sequence log-weight; the
# positives a sequence clip starves (w < 1 - diag_eps) and the share of the coefficient they still receive, with
# their lengths (pooled and within their group); what a clip would zero; the k3 estimate of KL(mu || pi); the
# weights' effective sample share. They describe the batch and never enter the gradient: policy_loss returns the
# coefficient it applied (stats["phi"]) and the trainer calls `diagnostics` once per mini-batch with it.

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

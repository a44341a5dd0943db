"""The study-only kernel rows, registered into nano_respo.kernel.METHOD_TABLE by name when research/ is imported.

    respo_wtilt          this project's reconstruction of ReSPO from the paper's abstract, before the paper was
                         public: VESPO's family w**alpha exp(-lambda (w - 1)) with a flat positive branch
                         (docs/math.md §8); the earlier studies and the toy's selection ran it
    respo_pos_clip_neg   the branch ablation: ReSPO's phi_+ on positives, the sequence clip on negatives
    respo_pos_vespo_neg  the other ablation: ReSPO's phi_+ on positives, VESPO's phi_- on negatives
    clip_pos_respo_neg   the mirror of respo_pos_clip_neg: the sequence clip on positives, ReSPO's published phi_-
                         on negatives (research/TABLE.md, the tail's source)
    seq_clip_lowpos1     the sequence clip, but 1 for a positive below 1 - eps_low: it differs from seq_clip only
                         on the starved (the drift study's dose-response arm)

respo_wtilt reads its four knobs from a StudyLossConfig; a plain LossConfig runs it at their defaults, the
constants every study ran.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nano_respo.kernel import METHOD_TABLE, SEQUENCE, LossConfig, clip_coefficient, power_tilt, respo_branch


@dataclass(frozen=True)
class StudyLossConfig(LossConfig):
    """LossConfig and the reconstruction's knobs."""
    wtilt_alpha_pos: float = 0.0
    """respo_wtilt (this project's reconstruction, w**alpha exp(-lambda (w - 1))): positive power in [0, 1]."""
    wtilt_lambda_pos: float = 0.1
    """respo_wtilt: positive tilt."""
    wtilt_alpha_neg: float = 3.0
    """respo_wtilt: negative power."""
    wtilt_lambda_neg: float = 2.0
    """respo_wtilt: negative tilt."""

    def __post_init__(self):
        super().__post_init__()
        if not 0.0 <= self.wtilt_alpha_pos <= 1.0:
            raise ValueError(f"wtilt_alpha_pos: must lie in [0, 1], got {self.wtilt_alpha_pos}")
        for name in ("wtilt_lambda_pos", "wtilt_alpha_neg", "wtilt_lambda_neg"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")


AT_THE_DEFAULTS = StudyLossConfig()  # what a plain LossConfig runs respo_wtilt with


def respo_wtilt_coefficient(log_w, positive, cfg, eps):
    """The reconstruction: VESPO's family with (alpha, lambda) = (0, 0.1) on positives, (3, 2) on negatives."""
    knobs = cfg if isinstance(cfg, StudyLossConfig) else AT_THE_DEFAULTS
    return torch.where(positive, power_tilt(log_w, knobs.wtilt_alpha_pos, knobs.wtilt_lambda_pos, cfg.log_w_max),
                       power_tilt(log_w, knobs.wtilt_alpha_neg, knobs.wtilt_lambda_neg, cfg.log_w_max))


def respo_pos_clip_neg_coefficient(log_w, positive, cfg, eps):
    """The branch ablation: ReSPO's phi_+ on positives, the sequence clip's w (0 below 1 - eps_low) on negatives."""
    return torch.where(positive, respo_branch(log_w, cfg.alpha_pos, cfg.beta_pos, cfg.lambda_pos, cfg.log_w_max),
                       clip_coefficient(log_w, positive, cfg, eps))


def respo_pos_vespo_neg_coefficient(log_w, positive, cfg, eps):
    """The other branch ablation: ReSPO's phi_+ on positives, VESPO's w**k exp(-lambda (w - 1)) on negatives."""
    return torch.where(positive, respo_branch(log_w, cfg.alpha_pos, cfg.beta_pos, cfg.lambda_pos, cfg.log_w_max),
                       power_tilt(log_w, cfg.vespo_k_neg, cfg.vespo_lambda_neg, cfg.log_w_max))


def clip_pos_respo_neg_coefficient(log_w, positive, cfg, eps):
    """The mirror ablation: the sequence clip's w (0 above 1 + eps_high) on positives, ReSPO's phi_- on negatives."""
    return torch.where(positive, clip_coefficient(log_w, positive, cfg, eps),
                       respo_branch(log_w, cfg.alpha_neg, cfg.beta_neg, cfg.lambda_neg, cfg.log_w_max))


def seq_clip_lowpos1_coefficient(log_w, positive, cfg, eps):
    """The sequence clip, but 1 for a positive below 1 - eps_low: it differs from seq_clip only on the starved."""
    starved = positive & (torch.exp(log_w.clamp(max=cfg.log_w_max)) < 1 - eps[0])
    return torch.where(starved, torch.ones_like(log_w), clip_coefficient(log_w, positive, cfg, eps))


METHOD_TABLE.update({
    # method:              (ratio level, coefficient,                    (eps_low, eps_high), length_norm)
    "respo_wtilt":         (SEQUENCE, respo_wtilt_coefficient,         (0.2, 0.2),   False),
    "respo_pos_clip_neg":  (SEQUENCE, respo_pos_clip_neg_coefficient,  (0.2, 0.2),   False),
    "respo_pos_vespo_neg": (SEQUENCE, respo_pos_vespo_neg_coefficient, (0.2, 0.2),   False),
    "seq_clip_lowpos1":    (SEQUENCE, seq_clip_lowpos1_coefficient,    (0.2, 0.2),   False),
    "clip_pos_respo_neg":  (SEQUENCE, clip_pos_respo_neg_coefficient,  (0.2, 0.2),   False),
})

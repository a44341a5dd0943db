"""Draw docs/phi.png, the README's figure: ReSPO's two branches against the sequence clip.

    python docs/make_figures.py

Every curve is computed by nano_respo.kernel (the coefficient functions the loss uses), at
LossConfig's defaults; nothing here re-implements the math.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch

from nano_respo.kernel import LossConfig, clip_coefficient, respo_coefficient

OUT = Path(__file__).resolve().parent / "phi.png"


def main() -> Path:
    cfg = LossConfig()
    eps = (0.2, 0.2)
    log_w = torch.linspace(math.log(0.01), math.log(10.0), 600, dtype=torch.float64)
    w = log_w.exp()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, positive in zip(axes, (True, False)):
        sign = torch.full_like(log_w, positive, dtype=torch.bool)
        respo = respo_coefficient(log_w, sign, cfg.alpha_pos, cfg.lambda_pos, cfg.alpha_neg, cfg.lambda_neg)
        clip = clip_coefficient(log_w, sign, cfg, eps)
        ax.plot(w, w, color="grey", linestyle=":", label="plain importance sampling: w")
        ax.plot(w, clip, color="tab:blue", linestyle="--", label="sequence clip, eps 0.2")
        ax.plot(w, respo, color="tab:red", linewidth=2.2,
                label=f"ReSPO at its defaults (alpha, lambda) = ({cfg.alpha_pos:g}, {cfg.lambda_pos:g}) "
                      f"for A > 0, ({cfg.alpha_neg:g}, {cfg.lambda_neg:g}) for A < 0")
        branch = "+" if positive else "-"
        alpha, lam = (cfg.alpha_pos, cfg.lambda_pos) if positive else (cfg.alpha_neg, cfg.lambda_neg)
        formula = f"$\\phi_{branch}(w) = w^{{{alpha:g}}} e^{{-{lam:g}(w-1)}}$"
        ax.axvline(1.0, color="black", linewidth=0.6)
        ax.set_xscale("log")
        ax.set_ylim(-0.05, 2.0)
        ax.set_xlabel("w = pi(y|x) / mu(y|x)   (1 = on-policy)")
        ax.grid(alpha=0.3)
        if positive:
            ax.set_title(f"correct answer, A > 0:   ReSPO {formula}")
            ax.set_ylabel("coefficient phi on A grad log pi")
            ax.annotate("clip: weight w -> 0\n(starved)", xy=(0.05, 0.05), xytext=(0.02, 0.55),
                        arrowprops=dict(arrowstyle="->", color="tab:blue"), color="tab:blue", fontsize=9)
            ax.annotate("ReSPO keeps about 1.1", xy=(0.03, 1.1), xytext=(0.012, 1.5),
                        arrowprops=dict(arrowstyle="->", color="tab:red"), color="tab:red", fontsize=9)
        else:
            ax.set_title(f"wrong answer, A < 0:   ReSPO {formula}")
            ax.annotate("clip: weight w, unbounded", xy=(1.9, 1.9), xytext=(0.02, 1.7),
                        arrowprops=dict(arrowstyle="->", color="tab:blue"), color="tab:blue", fontsize=9)
            ax.annotate("ReSPO: peak 1.24 at w = 1.5,\nthen -> 0", xy=(3.5, 0.45), xytext=(0.015, 0.9),
                        arrowprops=dict(arrowstyle="->", color="tab:red"), color="tab:red", fontsize=9)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(OUT, dpi=100)
    plt.close(fig)
    return OUT


if __name__ == "__main__":
    print(main())

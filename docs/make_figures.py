"""Draw docs/phi.png, the README's figure: ReSPO's two branches against the sequence clip, and print both
branches at a row of weights (the numbers docs/math.md §3 describes).

    python docs/make_figures.py                 # writes docs/phi.png
    python docs/make_figures.py --out /tmp/phi.png

Every curve and number is computed by nano_respo.kernel (the coefficient functions the loss uses), at
LossConfig's defaults (the paper's constants); nothing here re-implements the math.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch

from nano_respo.kernel import METHOD_TABLE, LossConfig, clip_coefficient

OUT = Path(__file__).resolve().parent / "phi.png"
ROW = (0.01, 0.1, 0.25, 0.5, 0.8, 1.0, 1.2, 2.0, 5.0, 10.0)  # the weights the table prints


def coefficient(method: str, log_w: torch.Tensor, positive: bool) -> torch.Tensor:
    """A sequence-level method's phi at the weights exp(log_w), read from the kernel's own table."""
    cfg = LossConfig(method=method)
    return METHOD_TABLE[method][1](log_w, torch.full_like(log_w, positive, dtype=torch.bool), cfg, None)


def table() -> str:
    log_w = torch.tensor([math.log(w) for w in ROW], dtype=torch.float64)
    lines = ["w        " + " ".join(f"{w:>6g}" for w in ROW)]
    for name, positive in (("phi_+(w)", True), ("phi_-(w)", False)):
        lines.append(f"{name} " + " ".join(f"{v:6.3f}" for v in coefficient("respo", log_w, positive).tolist()))
    return "\n".join(lines)


def draw(out: Path = OUT) -> Path:
    cfg = LossConfig()
    log_w = torch.linspace(math.log(0.01), math.log(10.0), 600, dtype=torch.float64)
    w = log_w.exp()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    formulas = {True: r"$\phi_+(w) = \frac{1+w}{2}\,e^{1-w}$", False: r"$\phi_-(w) = \sqrt{w}\,e^{2(1-\sqrt{w})}$"}
    for ax, positive in zip(axes, (True, False)):
        sign = torch.full_like(log_w, positive, dtype=torch.bool)
        ax.plot(w, w, color="grey", linestyle=":", label="plain importance sampling: w")
        ax.plot(w, clip_coefficient(log_w, sign, cfg, (0.2, 0.2)), color="tab:blue", linestyle="--",
                label="sequence clip, eps 0.2")
        ax.plot(w, coefficient("vespo", log_w, positive), color="tab:green", linewidth=1.0,
                label="VESPO, for comparison")
        ax.plot(w, coefficient("respo", log_w, positive), color="tab:red", linewidth=2.2,
                label="ReSPO, the paper's constants")
        ax.axvline(1.0, color="black", linewidth=0.6)
        ax.axhline(1.0, color="black", linewidth=0.4, linestyle=":")
        ax.set_xscale("log")
        ax.set_ylim(-0.05, 2.0)
        ax.set_xlabel("w = pi(y|x) / mu(y|x)   (1 = on-policy)")
        ax.grid(alpha=0.3)
        if positive:
            ax.set_title(f"correct answer, A > 0:   ReSPO {formulas[True]}", fontsize=10)
            ax.set_ylabel("coefficient phi on A grad log pi")
            ax.annotate("clip: weight w -> 0\n(starved)", xy=(0.05, 0.05), xytext=(0.02, 0.55),
                        arrowprops=dict(arrowstyle="->", color="tab:blue"), color="tab:blue", fontsize=9)
            ax.annotate("ReSPO: most at w -> 0 (e/2),\nfades above 1", xy=(0.03, 1.33), xytext=(0.012, 1.65),
                        arrowprops=dict(arrowstyle="->", color="tab:red"), color="tab:red", fontsize=9)
        else:
            ax.set_title(f"wrong answer, A < 0:   ReSPO {formulas[False]}", fontsize=10)
            ax.annotate("clip: weight w, unbounded", xy=(1.9, 1.9), xytext=(0.02, 1.7),
                        arrowprops=dict(arrowstyle="->", color="tab:blue"), color="tab:blue", fontsize=9)
            ax.annotate("ReSPO: peak e/2 at w = 1/4,\n-> 0 at both ends", xy=(4.0, 0.4), xytext=(0.012, 0.95),
                        arrowprops=dict(arrowstyle="->", color="tab:red"), color="tab:red", fontsize=9)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--out", type=Path, default=OUT, help="where the figure goes (default: docs/phi.png)")
    print(table())
    print(draw(parser.parse_args(argv).out))


if __name__ == "__main__":
    main()

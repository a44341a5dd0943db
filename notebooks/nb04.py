"""Cells of 04_tiny_qwen3.ipynb (built by notebooks/build.py): the committed LLM run logs, plotted."""

NAME = "04_tiny_qwen3.ipynb"

CELLS = [
("md", r"""# 04 · ReSPO against clipping on a tiny Qwen3

The runs of `experiments/run.py`: the offline tiny Qwen3 (dense, and MoE with 8 experts,
top-2) after the warm start, trained with RL on the long-answer `reverse` task, one run per
method $\times$ reuse $R$ $\times$ seed, every run with the same budget of rollout batches.
No training happens here: this notebook reads the per-run records the runner committed
(`experiments/results/records.json`) and plots them. Read it beside `RESULTS.md`, which
states the command that produced the runs and the verdict on each of the paper's claims.

At $R=1$ every update is on-policy, where every method's gradient is the plain policy
gradient, so one run (labelled `respo`) stands for all methods there."""),
("code", """import io
import json
from IPython.display import Image, Markdown, display
from nano_respo.report import diagnostics_table, outcome_table, paired_table, plot_low_w, plot_rewards

records = json.load(open("../experiments/results/records.json"))
models = list(dict.fromkeys(r["model"] for r in records))
for model in models:
    runs = [r for r in records if r["model"] == model]
    print(f"{model}: {len(runs)} runs, methods {sorted({r['method'] for r in runs})}, "
          f"R {sorted({r['reuse'] for r in runs})}, seeds {sorted({r['seed'] for r in runs})}")

def show(plot, runs, **kwargs):   # draw with nano_respo.report, show the 256-colour PNG it writes (small file)
    png = io.BytesIO()
    plot(runs, png, **kwargs)
    display(Image(png.getvalue()))"""),
("md", r"""## Learning curves

Training reward of each rollout batch (mean over seeds, 95% $t$ interval), one panel per
reuse factor. Early AUC in the tables is the mean reward over the first quarter of the
batches, full AUC over all of them, final train over the last tenth."""),
("code", """for model in models:
    show(plot_rewards, [r for r in records if r["model"] == model], title=model)"""),
("md", r"""## Outcomes and paired differences

Means $\pm$ 95% intervals over seeds; then ReSPO minus each baseline on the same seeds
(an interval that excludes 0 is a difference these seeds resolve). Held-out is the greedy
accuracy on 128 held-out problems after the last batch."""),
("code", """for model in models:
    runs = [r for r in records if r["model"] == model]
    display(Markdown(f"### {model}"))
    display(Markdown(outcome_table(runs, 0.1)))
    display(Markdown(paired_table(runs)))"""),
("md", r"""## Does the starvation appear on the LLM?

Averaged over the off-policy optimizer steps (all but the first step of each rollout
batch, where every $w=1$): the share of positive responses with $w<0.8$, the share of
the positives' coefficient mass they receive, and the mean coefficient $\phi$ one of them
receives (the dotted line is 1, what it would get on-policy)."""),
("code", """for model in models:
    runs = [r for r in records if r["model"] == model and r["reuse"] > 1]
    display(Markdown(f"### {model}"))
    show(plot_low_w, runs)
    display(Markdown(diagnostics_table(runs)))"""),
]

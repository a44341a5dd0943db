# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Deeper · The tiny Qwen3's batches and records
#
# The record readings behind core notebook 04 ([04_starvation_watched](../../notebooks/04_starvation_watched.ipynb)). Every ReSPO
# coefficient of §1-§4, live or read from the committed studies, is this project's reconstruction,
# `respo_wtilt` (w^alpha e^{-lambda (w - 1)} per branch), the kernel those studies ran; the
# methods run and are tabulated under `seq-mean-token-sum-norm` aggregation (`AGG` below), the
# studies' own. notebooks/deeper/branches_explored §10 reads a batch with the published kernel, `respo`, and so does
# exercise 2 (§5), which grades a coefficient written by hand against `respo`.
#
# The toy (`research/notebooks/starvation_controls`; core notebook 04_starvation_watched §1-§3) showed the mechanism; this notebook looks for it on a language model, and the
# committed studies' answer comes first: on this model it could not be produced (Study 3's manipulation
# check failed, §4), so what follows shows the coefficients at work on batches whose positives drifted,
# not the paper's mechanism at work. A 0.3M-parameter
# Qwen3 (`tiny-qwen3`, offline, character tokenizer) after its warm start answers the
# long-answer `reverse` task ("reverse 48213" → "31284") most of the time. (1) We train it with
# RL for a few rollout batches as the committed `reverse` study did, at the two learning rates
# that study used; (2) we *read* one batch after its reuse steps: which correct answers
# fell to a low weight $w$, what each method would give them, whether a prefix shared with
# the wrong answers is why, and which lengths lose the most signal. Then (3) the committed records of the full runs, (4) what they
# found, with the two pre-registered tests (`digit_sum`, `digit_conflict`) and their verdicts, (5) two exercises
# on the batch and (6) quick questions.

# %%
import io
import json
import math
import re
from pathlib import Path

import matplotlib.pyplot as plt
import torch
import transformers
from IPython.display import Image, Markdown, display
from matplotlib.ticker import PercentFormatter
from PIL import Image as PILImage

import checks
from course import confirm, load_quietly
import toy
from nano_respo.kernel import METHOD_TABLE, LossConfig, coefficients, sequence_log_weight
from research.study_rows import StudyLossConfig
from research.lab.report import diagnostics_table, mean_ci, outcome_table, paired_across
from nano_respo.tasks import answers_match, extract_answer

AGG = "seq-mean-token-sum-norm"  # the aggregation the committed studies ran under

torch.set_num_threads(1)
transformers.utils.logging.disable_progress_bar()   # its weight-loading bar would be saved as a stuck 0% widget
plt.rcParams.update({"figure.dpi": 100, "font.size": 11, "axes.titlesize": 11, "legend.fontsize": 9,
                     "axes.grid": True, "grid.alpha": 0.3})
ROOT = Path(toy.__file__).resolve().parent.parent


def show_figure(fig):
    """Show a figure as a 256-colour PNG: full size and sharp, a third of the bytes (the notebook stays small)."""
    buffer, small = io.BytesIO(), io.BytesIO()
    fig.savefig(buffer, dpi=90, format="png")
    plt.close(fig)
    PILImage.open(buffer).convert("RGB").quantize(colors=256).save(small, format="PNG", optimize=True)
    display(Image(small.getvalue()))


from research import figures                  # the committed records, read back
from research import run as experiment       # the study's protocol

# %% [markdown]
# ## 1. A few rollout batches, reused, at the study's learning rates
#
# Which learning rates? The committed `reverse` study (research/README.md) selected one for the
# sequence clip on the dense model at heavy reuse, which is also `train.py`'s default, and ran
# a stress cell with every method at a higher one. Both are read from the records, not typed:

# %%
from nano_respo.rollout import policy_logprobs  # noqa: E402
from train import TrainConfig, rl_iteration  # noqa: E402

selected_runs = [r for r in figures.llm("selected")["default"]
                 if (r["model"], r["method"], r["reuse"], r["lag"]) == ("tiny-qwen3", "seq_clip", 8, 0)]
stress_runs = [r for r in figures.llm("stress")["default"] if r["method"] == "seq_clip"]
(selected_lr,) = {r["lr"] for r in selected_runs}
(stress_lr,) = {r["lr"] for r in stress_runs}
protocol = experiment.ExperimentConfig()                     # what research/run.py passed to every train.py
rates = (selected_lr, stress_lr)
print(f"selected lr {selected_lr:g}: research/results/default/records.json, the sequence clip on tiny-qwen3 at R = 8 "
      f"({len(selected_runs)} seeds); train.py's default lr is {TrainConfig().lr:g}")
print(f"stress lr {stress_lr:g}: research/results/default/lr3e-4.json, every method at R = 8 ({len(stress_runs)} "
      f"seeds of the sequence clip)")
print(f"protocol of research/run.py: {protocol.prompts_per_iteration} prompts x 8 samples per rollout batch, "
      f"{protocol.epochs} epochs over each batch, {protocol.iterations} batches a run")

# %% [markdown]
# The one cell that calls the trainer. For each rate: the warm-started model (supervised
# training to convergence, cached under `NANO_RESPO_CACHE` after its first build), then
# `BATCHES` iterations of `train.rl_iteration`, the loop `train.py --method seq_clip --reuse 8
# --epochs 2` runs: sample a rollout batch of the study's size (storing $\log\mu$ per token),
# reward it, centre the advantages in each group of 8, take 8 sequence-clip optimizer steps on
# it (2 epochs × 4 mini-batches of whole groups). After each batch's 8 steps we recompute
# $\log\pi$ on that batch: its $w=\pi/\mu$ is what the batch's last step saw, give or take that
# step's own update. §2 reads, at each rate, the batch that ended with the most positives below
# $w=0.8$ (the last one on a tie), a rule and not a choice made by looking: which batch that is
# depends on the CPU's rounding, and the notebook's sentences are printed from whichever it is.

# %%
BATCHES = 3


def read_back(batch, logp, tokenizer):
    """One rollout batch after its steps: log-probs under pi and mu, advantages, log w and the text."""
    width = batch.completion_mask.shape[1]
    ids = torch.where(batch.completion_mask, batch.input_ids[:, -width:], tokenizer.pad_token_id)   # [N, C]
    return {"logp": logp, "old_logp": batch.old_logp, "mask": batch.completion_mask, "adv": batch.advantages,
            "rewards": batch.rewards, "log_w": sequence_log_weight(logp, batch.old_logp, batch.completion_mask), "ids": ids,
            "prompts": tokenizer.batch_decode(batch.input_ids[:, :-width], skip_special_tokens=True),
            "completions": tokenizer.batch_decode(ids, skip_special_tokens=True)}


def train_a_few_batches(lr):
    """The warm start, then BATCHES rl_iterations at `lr`; per batch a summary and the batch read back; the view
    is the batch with the most positives below w = 0.8 (the last on a tie), with every batch kept under "batches"."""
    cfg = TrainConfig(model="tiny-qwen3", task="reverse", loss=LossConfig(agg=AGG, method="seq_clip"), reuse=8,
                      epochs=protocol.epochs, prompts_per_iteration=protocol.prompts_per_iteration, lr=lr, seed=0)
    task, model, tokenizer = load_quietly(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    step, summary, batches = 0, [], []
    for iteration in range(BATCHES):
        batch, _, step = rl_iteration(model, tokenizer, task, optimizer, cfg, iteration=iteration, step=step)
        with torch.no_grad():
            logp, _, _ = policy_logprobs(model, batch, cfg.temperature)      # [N, C] log pi after the 8 steps
        batches.append(read_back(batch, logp, tokenizer))
        adv, log_w = batch.advantages, batches[-1]["log_w"]
        summary.append((batch.rewards.mean().item(), int((adv > 0).sum()), int((adv < 0).sum()),
                        int(((adv > 0) & (log_w < math.log(0.8))).sum()), int(((adv < 0) & (log_w > math.log(1.2))).sum())))
    read = max(range(BATCHES), key=lambda b: (summary[b][3], b))                 # most positives below 0.8, last on a tie
    return {"cfg": cfg, "summary": summary, "batches": batches, "read": read, **batches[read]}


views = {lr: train_a_few_batches(lr) for lr in rates}
print("batch | reward | positives | negatives | positives with w < 0.8 | negatives with w > 1.2   (after its 8 steps)")
for lr, view in views.items():
    for b, (reward, n_pos, n_neg, n_low, n_high) in enumerate(view["summary"], 1):
        print(f"lr {lr:g}, batch {b} | {reward:.2f} | {n_pos:>3} | {n_neg:>3} | {n_low:>3} | {n_high:>3}"
              + ("   <- read in §2" if b - 1 == view["read"] else ""))
confirm("no negative ends a batch above w = 1.2 at either rate (exercise 1 asks why)",
        sum(s[4] for view in views.values() for s in view["summary"]), 1e-12)

# %% [markdown]
# ## 2. Read one batch at each rate
#
# The counts of the batch §2 reads (marked above), at each rate, and the finding they give:

# %%
for lr, view in views.items():
    adv, log_w = view["adv"], view["log_w"]
    positive, negative = adv > 0, adv < 0
    n_low = int((positive & (log_w < math.log(0.8))).sum())
    print(f"lr {lr:g}: {len(adv)} responses, reward {view['rewards'].mean():.2f}; {int(positive.sum())} positives, "
          f"{int(negative.sum())} negatives, {int((adv == 0).sum())} in all-equal groups (no signal); "
          f"w of the positives from {log_w[positive].exp().min():.3f} to {log_w[positive].exp().max():.3f}, "
          f"{n_low} below 0.8; largest w of a negative {log_w[negative].exp().max():.2g}")
    gspo_phi = coefficients(view["logp"], view["old_logp"], adv, view["mask"], LossConfig(agg=AGG, method="gspo"))[0][:, 0]
    print(f"  GSPO (upper clip 1 + {METHOD_TABLE['gspo'][2][1]:g} on s = w^(1/|y|)) gives 0 to "
          f"{int((positive & (gspo_phi == 0)).sum())} of these {int(positive.sum())} positives")
starved_at = {lr: sum(s[3] for s in view["summary"]) for lr, view in views.items()}
print(f"Finding: over {BATCHES} batches, {starved_at[selected_lr]} positives ended a batch below w = 0.8 at the selected "
      f"lr {selected_lr:g} and {starved_at[stress_lr]} at the stress lr {stress_lr:g}. "
      + ("In these batches of one seed the selected rate starves none; the committed runs (next line) show that "
         "over 12 batches and 8 seeds it starves a few, the stress rate many more." if starved_at[selected_lr] == 0 else
         "Both rates starve some positives here."))
print("The committed runs over 12 batches (research/figures.py): share of positives below w = 0.8 "
      f"{figures.value('llm_low_w_share_selected')} at the selected rates, {figures.value('llm_low_w_share_stress')} "
      "in the stress cell")

# %% [markdown]
# Every response's $\log w$ against its length, at both rates (the axis is linear between
# $\pm0.5$, where the $w=0.8$ and $w=1.2$ lines sit, and logarithmic beyond, where the stress
# rate sends some responses far down):

# %%
fig, axes = plt.subplots(1, 2, figsize=(13, 4.6), sharey=True)
for ax, (lr, view) in zip(axes, views.items()):
    lengths, log_w, adv = view["mask"].sum(-1), view["log_w"], view["adv"]
    for rows, colour, name in ((adv > 0, "tab:red", "positives"), (adv < 0, "tab:blue", "negatives"),
                               (adv == 0, "0.6", "no signal (A = 0)")):
        jitter = 0.2 * torch.randn(int(rows.sum()), generator=torch.Generator().manual_seed(0))
        ax.scatter(lengths[rows] + jitter, log_w[rows], s=16, alpha=0.6, color=colour, label=name)
    ax.axhline(math.log(0.8), color="k", ls=":", lw=1.2, label="w = 0.8")
    ax.axhline(math.log(1.2), color="0.4", ls="--", lw=1.2, label="w = 1.2")
    ax.set_yscale("symlog", linthresh=0.5)
    ax.set(xlabel="response length (tokens, EOS included)", title=f"lr {lr:g}: batch {view['read'] + 1} after its 8 updates")
axes[0].set_ylabel("log w (symlog)")
axes[1].legend(loc="center left", bbox_to_anchor=(1.0, 0.5))
fig.tight_layout()
show_figure(fig)

# %% [markdown]
# The lowest-$w$ positives (responses the reward scored 1), as text, and the coefficient each method
# would give them on this drifted batch (token-level methods: the mean over the response's tokens;
# every method gives 1 on-policy). Copies of one answer in a group are counted, not repeated. The
# correct reversal is unique, but a positive is whatever the reward accepts, and the reward reads the
# last number in the text: the cell after the tables lists the positives that are not pure digit strings.

# %%
methods = ("seq_clip", "grpo", "gspo", "cispo", "vespo", "respo_wtilt")
for view in views.values():
    view["phi"] = {m: coefficients(view["logp"], view["old_logp"], view["adv"], view["mask"], LossConfig(agg=AGG, method=m))[0]
                   for m in methods}                                                   # [N, T] per method
    view["per_response"] = {m: (phi * view["mask"]).sum(-1) / view["mask"].sum(-1).clamp(min=1)
                            for m, phi in view["phi"].items()}                        # [N] mean over tokens


def problem(prompt: str) -> str:
    found = re.search(r"reverse (\d+)", prompt)
    return f"reverse {found.group(1)}" if found else prompt


def show(view, rows, title):
    """A markdown table of distinct (prompt, response) pairs among `rows`, in their order."""
    header = "| row | prompt | response | tokens | copies | reward | w | " + " | ".join(methods) + " |"
    lines = [f"**{title}**", "", header, "|---" * (7 + len(methods)) + "|"]
    seen = {}
    for i in rows.tolist():
        seen.setdefault((view["prompts"][i], view["completions"][i]), []).append(i)
    for (prompt, completion), copies in seen.items():
        i = copies[0]
        given = " | ".join(f"{view['per_response'][m][i]:.2f}" for m in methods)
        lines.append(f"| {i} | `{problem(prompt)}` | `{completion}` | {int(view['mask'][i].sum())} | {len(copies)} | "
                     f"{view['rewards'][i]:.0f} | {view['log_w'][i].exp():.3g} | {given} |")
    display(Markdown("\n".join(lines)))


for lr, view in views.items():
    rows = (view["adv"] > 0).nonzero().squeeze(1)
    rows = rows[view["log_w"][rows].sort(stable=True).indices]
    distinct = list(dict.fromkeys(view["completions"][i] for i in rows.tolist()))[:5]
    show(view, rows[[view["completions"][i] in distinct for i in rows.tolist()]],
         f"lr {lr:g}: the five lowest-w positives")

# %%
def lowest_positive(v):
    """The row of the positive with the smallest w (its copies tie; the first is taken)."""
    return int(torch.where(v["adv"] > 0, v["log_w"], torch.full_like(v["log_w"], math.inf)).argmin())


def reference(prompt: str) -> str:
    """The correct answer to a `reverse` prompt: its digits reversed."""
    return re.search(r"reverse (\d+)", prompt).group(1)[::-1]


malformed_at = {}
for lr, view in views.items():
    low_rows = [i for i in range(len(view["adv"])) if view["adv"][i] > 0 and view["log_w"][i] < math.log(0.8)]
    answers = {}
    for i in low_rows:
        answers.setdefault(view["completions"][i].strip(), i)                       # one row per distinct answer
    malformed = {text: i for text, i in answers.items() if text != reference(view["prompts"][i])}
    malformed_at[lr] = (len(answers), malformed)
    print(f"lr {lr:g}: {len(answers)} distinct positives below w = 0.8, {len(malformed)} of them not the reversal itself")
    for text, i in malformed.items():
        print(f"  row {i}: `{text}` ({int(view['mask'][i].sum())} tokens, w {view['log_w'][i].exp():.3g}): the reward reads "
              f"its last number, `{extract_answer(text)}`, which is the reversal, so it scores 1")
    lowest_text = view["completions"][lowest_positive(view)].strip()
    print(f"  the lowest positive at this rate is {'this malformed answer' if lowest_text in malformed else 'the clean reversal'}"
          + ("; every positive below 0.8 here is malformed, so this rate starves no clean correct answer in this batch"
             if answers and len(malformed) == len(answers) else ""))
confirm("every positive listed as malformed is rewarded through its last number, not its whole text",
        sum(abs(views[lr]["rewards"][i].item() - float(answers_match(extract_answer(text), reference(views[lr]["prompts"][i]))))
            for lr, (_, malformed) in malformed_at.items() for text, i in malformed.items()), 1e-12)

# %% [markdown]
# Read the list before the story below: a low-$w$ positive here may be a malformed answer (the digits
# plus a stray character) that the reward accepts, and its fall is then not a correct answer's
# starvation; where the lowest positive is one (printed), the sections below read it as a rewarded
# response of that group, which is what the loss sees, with that qualification.

# %% [markdown]
# ### Why did the lowest one fall? A test of the shared-prefix story
#
# One story says: the wrong answers of its group share their first digits with the right one,
# pushing them down pushed that prefix down, and the right answer fell with it. First the
# group's arithmetic. With $k$ of 8 right, $A=1-k/8$ on each right answer and $-k/8$ on each
# wrong one, so $\sum_gA=0$. On-policy ($\phi=1$) a token of a prefix shared by a set $S$ of
# the group's responses (same tokens, same context, so the same $\nabla\log\pi$) gets the net
# push $\sum_{i\in S}A_i$, because the default aggregation (`seq-mean-token-sum-norm`, a token
# sum over a fixed length) weighs every token alike. Where the right answers are one string they
# share all its prefixes, so $S$ is the $k$ right answers plus the $m$ wrong ones that share that
# prefix, and the net push is $k(1-k/8)-mk/8=\tfrac k8(8-k-m)\ge0$: zero where every wrong answer
# shares the prefix, positive elsewhere. A malformed right answer shares the others' prefixes up to
# its stray character, so the cell sums $A$ over whichever responses share each prefix. Computed
# for the lowest positive's group at the stress rate:

# %%
group_size = views[stress_lr]["cfg"].group_size


def group_of(i):
    return range(i // group_size * group_size, (i // group_size + 1) * group_size)


def shared_prefix(v, i, j):
    """Tokens response j shares with response i from the start (EOS included)."""
    same = (v["ids"][i] == v["ids"][j]) & v["mask"][i] & v["mask"][j]
    return int(same.int().cumprod(0).sum())


view = views[stress_lr]
adv, log_w = view["adv"], view["log_w"]
lowest = lowest_positive(view)
group = group_of(lowest)
length = int(view["mask"][lowest].sum())


print(f"row {lowest}: {problem(view['prompts'][lowest])} -> {view['completions'][lowest]}  ({length} tokens, "
      f"w {log_w[lowest].exp():.2g})")
for i in group:
    print(f"  row {i:>3}  {view['completions'][i]:<42} reward {view['rewards'][i]:.0f}  A {adv[i]:+.3f}  "
          f"w {log_w[i].exp():.2g}  shares {shared_prefix(view, lowest, i):>2} tokens with it")
right = [i for i in group if adv[i] > 0]
wrong = [i for i in group if adv[i] < 0]
k = len(right)
print(f"k = {k} right of {group_size}: {k} x {adv[right[0]]:+.3f} + {len(wrong)} x {adv[wrong[0]]:+.3f} = "
      f"{adv[list(group)].sum():+.1e}")
pushes = [sum(adv[j].item() for j in group if shared_prefix(view, lowest, j) >= t) for t in range(1, length + 1)]
print("net on-policy push on each prefix of it (sum of A over the responses sharing it), tokens 1.." + str(length) + ":")
print("  " + " ".join(f"{p:+.2f}" for p in pushes))
print(f"smallest: {min(pushes):+.3f}; where every right answer shares the prefix it is k/8 (8 - k - m), never below 0")
clip_phi = view["per_response"]["seq_clip"]                                   # [N] the clip's coefficient after the steps
late = [sum(clip_phi[i].item() * adv[i].item() for i in group if shared_prefix(view, lowest, i) >= t) for t in range(1, length + 1)]
print(f"the same sum with the sequence clip's coefficients after the 8 steps (phi A): smallest {min(late):+.3f}")

# %% [markdown]
# So, on-policy, nothing in its group pushes the shared prefix down. But the batch is reused and
# the parameters are shared with every other group, so the test is empirical: where along the
# response did $\log\pi-\log\mu$ fall? Below, the per-token log-ratio $d_t=\log\pi(y_t|y_{<t})-\log\mu(y_t|y_{<t})$
# along the lowest positive (red; $\log w=\sum_td_t$), and, as the control, along each wrong
# answer of its group (blue) up to where it leaves the right answer's prefix (a dot marks each
# divergence) and after. On a shared prefix a wrong answer's $d_t$ equals the right one's (same
# tokens, same context), so the curves coincide there by construction; the question is whether
# the right answer's fall sits on those shared tokens.

# %%
fig, axes = plt.subplots(1, 2, figsize=(13, 4.4), sharey=True)
for ax, (lr, v) in zip(axes, views.items()):
    low = lowest_positive(v)
    d = (v["logp"] - v["old_logp"])                                                 # [N, C] per-token log-ratio
    for j in (j for j in group_of(low) if v["adv"][j] < 0):
        n = int(v["mask"][j].sum())
        same = shared_prefix(v, low, j)
        ax.plot(range(1, n + 1), d[j, :n], color="tab:blue", alpha=0.5, lw=1)
        if same < n:
            ax.plot(same + 1, d[j, same], "o", color="tab:blue", ms=5)
    n = int(v["mask"][low].sum())
    ax.plot(range(1, n + 1), d[low, :n], color="tab:red", lw=2.2, label=f"lowest positive (w {v['log_w'][low].exp():.3g})")
    ax.plot([], [], color="tab:blue", label="wrong answers of its group (dot: where each diverges)")
    ax.axhline(0, color="k", lw=0.8)
    ax.set(xlabel="token position", title=f"lr {lr:g}: {problem(v['prompts'][low])}")
    ax.legend(loc="lower left")
axes[0].set_ylabel("d_t = log π − log μ of the token")
fig.tight_layout()
show_figure(fig)


def prefix_split(v, i):
    """(tokens of response i, how many of them some wrong answer of its group shares, log w on them, log w on the rest)."""
    same = max([shared_prefix(v, i, j) for j in group_of(i) if v["adv"][j] < 0] or [0])
    d = (v["logp"][i] - v["old_logp"][i])[v["mask"][i]]
    return len(d), same, d[:same].sum().item(), d[same:].sum().item()


prefix_reading = {}
for lr, v in views.items():
    low = lowest_positive(v)
    n, same, on_shared, on_rest = prefix_split(v, low)
    print(f"lr {lr:g}, lowest positive: {same} of its {n} tokens are shared with a wrong answer; log w {on_shared + on_rest:+.2f} = "
          f"{on_shared:+.2f} on them + {on_rest:+.2f} on the rest")
    starved = [i for i in range(len(v["adv"])) if v["adv"][i] > 0 and v["log_w"][i] < math.log(0.8)
               and i == next(j for j in group_of(i) if v["completions"][j] == v["completions"][i])]   # one per answer
    if starved:
        parts = torch.tensor([prefix_split(v, i) for i in starved])                      # [S, 4], one per distinct answer
        token_share = (parts[:, 1].sum() / parts[:, 0].sum()).item()
        fall_share = (parts[:, 2].sum() / (parts[:, 2] + parts[:, 3]).sum()).item()
        prefix_reading[lr] = (token_share, fall_share)
        print(f"  every starved positive ({len(starved)} distinct answers): shared tokens are {token_share:.0%} "
              f"of their tokens and carry {fall_share:.0%} of their total log w")
    else:
        print("  no positive below w = 0.8 at this rate")
    for text in dict.fromkeys(v["completions"][j] for j in group_of(low) if v["adv"][j] < 0):
        j = next(j for j in group_of(low) if v["completions"][j] == text)
        d = (v["logp"][j] - v["old_logp"][j])[v["mask"][j]]
        same = shared_prefix(v, low, j)
        print(f"  wrong answer row {j}: {same} tokens shared with it, log w {d.sum():+.2f} = {d[:same].sum():+.2f} on "
              f"them + {d[same:].sum():+.2f} after it diverges")

# %%
for lr, (token_share, fall_share) in prefix_reading.items():
    where = ("more of it than their share of the tokens: the fall sits on the prefix shared with wrong answers"
             if fall_share > token_share else
             "no more of it than their share of the tokens: the fall is not concentrated on the shared prefix")
    print(f"lr {lr:g}: the shared tokens carry {fall_share:.0%} of the starved positives' fall in log w, {where}")
confirm("the group's direct push on the lowest positive's prefixes is never negative, on-policy and with the clip's "
        "coefficients after the steps", max(0.0, -min(pushes), -min(late)), 1e-12)

# %% [markdown]
# What the test shows is printed above, per rate: where the starved positives' fall in $\log w$
# sits, on the tokens they share with a wrong answer of their group or after the divergence,
# against those tokens' share of the length. Whatever the split on a given CPU, the story's
# *reason* fails: the group's direct push on the shared tokens (the sum of $\phi A$ over the
# responses that contain them) is never negative, at the first step (on-policy, the
# arithmetic above) nor with the clip's coefficients after the last (the check); the steps in
# between were not recorded. Whatever lowered a shared token came through weights shared
# across positions and prompts: the pushes on *other* tokens, this group's wrong digits
# (printed above, with how far each wrong answer fell after it diverged) and the other groups',
# with steps whose length Adam sets. This batch cannot separate those sources; `research/notebooks/starvation_controls` §2
# separates interference from the optimizer on the toy, and notebooks/deeper/branches_explored §6 shows the
# interference exactly. Where a rate has no starved positive there is nothing to explain.
#
# ### Reading the coefficients of the lowest positive
#
# Each method's number in the first table, taken apart for the lowest positive at each rate:

# %%
eps_low, eps_high = METHOD_TABLE["grpo"][2]                                  # GRPO's clip range, also the sequence clip's
gspo_eps_high = METHOD_TABLE["gspo"][2][1]
for lr, v in views.items():
    low = lowest_positive(v)
    n = int(v["mask"][low].sum())
    r = (v["logp"][low] - v["old_logp"][low])[v["mask"][low]].exp()                # [n] token ratios
    grpo_by_hand = torch.where(r > 1 + eps_high, torch.zeros_like(r), r).mean()
    gspo_ratio = v["log_w"][low].div(n).exp()                                     # w^(1/|y|)
    print(f"lr {lr:g}, row {low}, {n} tokens, w {v['log_w'][low].exp():.3g}:")
    print(f"  sequence clip (A > 0): w where w <= {1 + eps_high:g}, 0 above: {v['per_response']['seq_clip'][low]:.3g}")
    print(f"  GRPO (token clip, A > 0): zeroes the {int((r > 1 + eps_high).sum())} tokens with r_t > {1 + eps_high:g}, keeps r_t on the "
          f"other {int((r <= 1 + eps_high).sum())}, {int((r < 1 - eps_low).sum())} of them below {1 - eps_low:g}; mean {grpo_by_hand:.3f} "
          f"(kernel {v['per_response']['grpo'][low]:.3f})")
    change = (f"the tokens fell by a factor {1 / gspo_ratio:.3f} each on average" if gspo_ratio < 1 else
              f"the tokens rose by a factor {gspo_ratio:.4f} each on average")
    print(f"  GSPO: its length-normalised ratio s = w^(1/{n}) = {gspo_ratio:.4f}, the geometric mean of the token ratios: "
          f"{change}; it gives s where s <= 1 + {gspo_eps_high:g}, 0 above: {v['per_response']['gspo'][low]:.3f}")
    print(f"  respo_wtilt: phi_+ = exp(-lambda_+ (w - 1)) = {v['per_response']['respo_wtilt'][low]:.3f}, at most e^lambda_+ = "
          f"{math.exp(StudyLossConfig().wtilt_lambda_pos):.3f} as w -> 0")

# %% [markdown]
# Read them against the first table. The sequence clip gives a positive its $w$ up to $1+\epsilon$
# and 0 above. GRPO's token clip, for $A>0$, zeroes only the tokens whose ratio *rose* above
# $1+\epsilon$ and keeps $r_t$ on every other token, including those whose ratio fell below
# $1-\epsilon$ (the printout counts both, and rebuilds GRPO's number by hand): a positive whose
# $w$ fell on a few tokens keeps $r_t\approx1$ on the rest, so GRPO keeps most of its gradient.
# GSPO's value is its length-normalised ratio $s=w^{1/|y|}$, the geometric mean of the token
# ratios: $s<1$ says the tokens' probabilities fell by a factor $1/s$ each *on average* (a fall
# on a few tokens is spread thin by the average), and $w=s^{|y|}$; above $1+\epsilon_{\rm high}$,
# which is tiny for GSPO, it gives 0 (how many positives it zeroes is printed under §2's
# counts). ReSPO's positive branch gives slightly more than 1 below $w=1$, its maximum
# $e^{\lambda_+}$ reached as $w\to0$.
#
# **Retained positive signal by length, on every batch.** A mean over the low-$w$ positives, or
# "are the starved positives long?", counts one tail only, and a drift that sends long responses
# into both tails makes it come out "long". Counting both tails: per length tercile of the
# positives, pooled over the three batches of each rate, the share of their on-policy push each
# method keeps, $R_m=\sum_{A>0}\phi_mA\,/\sum_{A>0}A$ (1 for every method on-policy). It measures
# the signal lost by length, not what made it lost (the reference after the table):

# %%
retained_methods = ("seq_clip", "grpo", "gspo", "cispo", "vespo", "respo_wtilt", "respo_pos_clip_neg", "topr", "is")
retained_by_rate = {}
for lr, view in views.items():
    lengths_all = torch.cat([b["mask"].sum(-1) for b in view["batches"]]).float()
    adv_all = torch.cat([b["adv"] for b in view["batches"]])
    cuts = torch.quantile(lengths_all[adv_all > 0], torch.tensor([1 / 3, 2 / 3]))
    kept_push = {m: torch.zeros(3) for m in retained_methods}
    total = torch.zeros(3)
    for b in view["batches"]:
        pos = b["adv"] > 0
        third = torch.bucketize(b["mask"].sum(-1).float(), cuts, right=True)                  # [N] 0, 1, 2
        for k in range(3):
            total[k] += b["adv"][pos & (third == k)].sum()
        for m in retained_methods:
            phi, _ = coefficients(b["logp"], b["old_logp"], b["adv"], b["mask"], LossConfig(agg=AGG, method=m))
            per_response = (phi * b["mask"]).sum(-1) / b["mask"].sum(-1).clamp(min=1)        # [N]
            for k in range(3):
                rows = pos & (third == k)
                kept_push[m][k] += (per_response[rows] * b["adv"][rows]).sum()
    retained_by_rate[lr] = {m: v / total for m, v in kept_push.items()}
    bounds = [int(lengths_all[adv_all > 0].min()), *[int(c) for c in cuts.tolist()], int(lengths_all[adv_all > 0].max())]
    print(f"lr {lr:g}: R_m over the three batches' positives, by length tercile (about {bounds[0]}-{bounds[1]} | "
          f"{bounds[1]}-{bounds[2]} | {bounds[2]}-{bounds[3]} tokens)")
    for m, r in retained_by_rate[lr].items():
        print(f"  {m:<19} " + " | ".join(f"{v:.3f}" for v in r.tolist()))
stress_clip = retained_by_rate[stress_lr]["seq_clip"]
gap = (stress_clip[2] - stress_clip[0]).item()
print(f"at the stress rate the sequence clip keeps {stress_clip[0]:.3f} of the shortest third's push and "
      f"{stress_clip[2]:.3f} of the longest third's (a difference of {gap:+.3f}): "
      + ("about the same share, both tails counted" if abs(gap) < 0.05 else
         "the longest positives keep less of it, both tails counted" if gap < 0 else
         "the longest positives keep more of it, both tails counted")
      + f"; its least-kept third is the {('shortest', 'middle', 'longest')[int(stress_clip.argmin())]}")
confirm("respo_wtilt keeps at least 0.9 of the positives' push in every tercile at both rates",
        max(0.0, *(0.9 - r["respo_wtilt"].min().item() for r in retained_by_rate.values())), 1e-12)

# %% [markdown]
# Read the rows at the stress rate. The last line says, from these batches, whether the
# sequence clip's loss falls more on the longest third than on the shortest, and which third
# loses most, with the positives it zeroes above $w=1.2$ counted along with those it scales down
# below 0.8. (Values above 1 are positives inside the band with $w$ slightly above 1: the clip, like
# `is`, gives them their $w$.) GSPO's row is what its
# tiny upper band does to positives whose tokens rose. ReSPO keeps at least 0.9 of the push in
# every third (the check). Three batches of one seed: the table shows what these batches did,
# not a rate.
#
# **Why $R_m$ alone cannot say why.** Take a drift with no pressure behind it: each token's
# log-ratio an independent draw of mean 0 and standard deviation $\sigma$, the same for every
# response. Then $\log w\sim\mathcal N(0,\sigma^2|y|)$, and the sequence clip keeps of a positive
# $E[w\,1(w\le1+\epsilon)]=e^{s^2/2}\,\Phi\big((\log(1+\epsilon)-s^2)/s\big)$ with $s=\sigma\sqrt{|y|}$:
# less the longer the response. The cell computes it in closed form, checks it by sampling, and,
# with lengths drawn from the stress batches' positives, how long that drift's low-$w$ and high-$w$
# positives are:

# %%
sigma, eps_band = 0.05, METHOD_TABLE["seq_clip"][2][1]
band_top = math.log(1 + eps_band)
draws = torch.Generator().manual_seed(0)
print(f"symmetric drift, sigma = {sigma} per token, no pressure: R_m of the sequence clip (closed form | sampled) "
      f"and of respo_wtilt (sampled)")
reference_rm = []
for n in (5, 15, 30, 60):
    s_n = sigma * math.sqrt(n)
    closed = math.exp(s_n ** 2 / 2) * torch.special.ndtr(torch.tensor((band_top - s_n ** 2) / s_n, dtype=torch.float64)).item()
    log_w_drawn = s_n * torch.randn(200_000, generator=draws, dtype=torch.float64)
    every = torch.ones_like(log_w_drawn, dtype=torch.bool)                              # all positives
    sampled = {m: METHOD_TABLE[m][1](log_w_drawn, every, LossConfig(agg=AGG, method=m), METHOD_TABLE[m][2]).mean().item()
               for m in ("seq_clip", "respo_wtilt")}
    reference_rm.append((closed, sampled["seq_clip"]))
    print(f"  |y| = {n:>2}: seq_clip {closed:.3f} | {sampled['seq_clip']:.3f}   respo_wtilt {sampled['respo_wtilt']:.3f}")
stress_lengths = torch.cat([b["mask"].sum(-1)[b["adv"] > 0] for b in views[stress_lr]["batches"]]).double()
picked = stress_lengths[torch.randint(len(stress_lengths), (2000, 75), generator=draws)]         # [batches, positives]
drawn = picked.sqrt() * sigma * torch.randn(picked.shape, generator=draws, dtype=torch.float64)  # log w, same drift
low_tail, high_tail = drawn < math.log(0.8), drawn > band_top


def mean_len(rows):
    return (picked * rows).sum() / rows.sum()


per_batch = ((picked * low_tail).sum(1) / low_tail.sum(1)) > ((picked * high_tail).sum(1) / high_tail.sum(1))
print(f"the same drift on 2000 batches of 75 positives with the stress batches' lengths: mean length below 0.8 "
      f"{mean_len(low_tail):.1f}, above 1.2 {mean_len(high_tail):.1f}, all {picked.mean():.1f} tokens; the low tail is "
      f"the longer in {per_batch.double().mean():.0%} of the batches")
confirm("with no pressure, the sequence clip keeps less of a longer positive (closed form, falling with |y|), and "
        "sampling agrees with the closed form to 0.01",
        max(0.0, *(b[0] - a[0] for a, b in zip(reference_rm, reference_rm[1:])),
            max(abs(c - m) for c, m in reference_rm) - 0.01), 1e-12)
confirm("with no pressure, both tails hold positives longer than average, the low one longer pooled (log 0.8 lies "
        "further out than log 1.2), and it is the longer in some batches and the shorter in others (a quarter to "
        "three quarters of them)",
        max(0.0, picked.mean() - mean_len(high_tail), mean_len(high_tail) - mean_len(low_tail),
            abs(per_batch.double().mean() - 0.5) - 0.25), 1e-12)

# %% [markdown]
# So a drift with no pressure at all makes the sequence clip keep less of the longer positives, and
# fills both tails with positives longer than average: the low tail a little longer, since $\log0.8$
# lies further from 0 than $\log1.2$, and the longer of the two in some batches only (the share
# printed), so "low longer than high" is a coin with a slight bias. A table of $R_m$ by length, like
# the one above, measures what each length loses; to attribute a loss to a pressure on long answers
# it needs a matched-drift comparison, positives of the same lengths under a drift of the same
# spread with no pressure, which these three batches do not give.
#
# *Takeaway:* at the rate the study selected, one batch's reuse leaves the correct answers near
# $w=1$ and every kernel gives them about 1, except GSPO, whose tiny upper clip zeroes the
# positives whose tokens rose, on average, past $1+\epsilon_{\rm high}$ (the count is printed
# under §2's counts); at the stress rate some correct answers fall below 0.8, the sequence clip
# scales their gradient by that fallen weight and zeroes the ones that rose, and the
# retained-signal table says which lengths that costs.
#
# ## 3. The committed runs
#
# `research/run.py` trained both tiny models (dense, and MoE with 8 experts top-2) from
# the same converged warm start with RL on `reverse`, five methods at the learning rate each
# scored best on two selection seeds, under heavy reuse and under reuse with stale rollouts.
# **What `--lag K` means:** each rollout batch is sampled by the policy of $K$ batches earlier
# (`offpolicy.LaggedPolicy` keeps those weights), and $\log\mu$ is that old policy's. So at the
# first of the $R$ steps on a batch $w=\pi_{\rm now}/\mu_{\rm lag}$ is already not 1: it carries
# the $K$ batches of updates since the sample (staleness), and the $R$ steps on the batch add
# their own drift on top (reuse); $w$ folds both. `research/notebooks/starvation_controls` §6 shows it on the toy. The
# whole evaluation ran twice, on two CPU settings, because float rounding decides which seeds
# learn; the per-run records are committed and read back here (`research/README.md` gives the commands).
# The protocol, from the records:

# %%
records = figures.llm("selected")
stress = figures.llm("stress")
models = list(dict.fromkeys(r["model"] for r in records["default"]))
for model_name in models:
    runs = [r for r in records["default"] if r["model"] == model_name]
    cells = sorted({(r["reuse"], r["lag"]) for r in runs})
    print(f"{model_name}: {len(runs)} runs per setting; cells " + ", ".join(f"R = {R}" + (f" with --lag {K}" if K else "")
                                                                          for R, K in cells)
          + f"; {len({r['seed'] for r in runs})} seeds; {len(runs[0]['reward_curve'])} rollout batches a run; lrs "
          + ", ".join(f"{m} {lr:g}" for m, lr in sorted({(r['method'], r['lr']) for r in runs})))

# %% [markdown]
# Training reward per rollout batch, mean and 95% band over seeds; ReSPO (thick) in every
# panel, against the sequence-level baselines (top row) and the token-level or
# length-normalised ones (bottom row), so no panel holds more than three bands:

# %%
PANELS = (("respo_wtilt", "seq_clip", "vespo"), ("respo_wtilt", "grpo", "gspo"))
COLOURS = {"respo_wtilt": "tab:red", "seq_clip": "tab:blue", "vespo": "tab:brown", "grpo": "tab:green", "gspo": "tab:orange"}


def cell_name(reuse, lag):
    return f"R = {reuse}" + (f", lag {lag}" if lag else "")


def reward_panels(columns, title):
    """columns: {column title: records}; one column per entry, a row per PANELS group."""
    fig, axes = plt.subplots(len(PANELS), len(columns), figsize=(4.6 * len(columns), 7), sharey=True, squeeze=False)
    for col, (name, runs) in enumerate(columns.items()):
        for row, methods_here in enumerate(PANELS):
            ax = axes[row][col]
            for method in methods_here:
                curves = [r["reward_curve"] for r in runs if r["method"] == method]
                if not curves:
                    continue
                stats = [mean_ci(list(batch)) for batch in zip(*curves)]
                mean = torch.tensor([m for m, _ in stats])
                half = torch.tensor([h for _, h in stats])
                x = range(1, len(mean) + 1)
                ax.plot(x, mean, color=COLOURS[method], lw=2.6 if method == "respo_wtilt" else 1.5,
                        label=f"{method} (lr {runs[[r['method'] for r in runs].index(method)]['lr']:g})")
                ax.fill_between(x, mean - half, mean + half, color=COLOURS[method], alpha=0.15)
            ax.set_title(name)
            ax.legend(loc="lower left")
            if row == len(PANELS) - 1:
                ax.set_xlabel("rollout batch")
    for row in axes:
        row[0].set_ylabel("training reward")
    fig.suptitle(title)
    fig.tight_layout()
    show_figure(fig)


for model_name in models:
    runs = [r for r in records["default"] if r["model"] == model_name]
    reward_panels({cell_name(*cell): [r for r in runs if (r["reuse"], r["lag"]) == cell]
                   for cell in sorted({(r["reuse"], r["lag"]) for r in runs})}, f"{model_name}, default CPU setting")

# %% [markdown]
# Outcomes on the default CPU setting (mean ± 95% interval over the seeds; held-out is pass@1 on
# held-out problems), then ReSPO (the reconstruction, `respo_wtilt`) minus each baseline on the same
# seeds, side by side for the two CPU settings: a difference counts only where both columns are bold
# on the same side. Every method in these tables trained under `seq-mean-token-sum-norm` aggregation
# (research/common.py pins it for every study), not `respo`'s token-mean default.

# %%
for model_name in models:
    of_model = {setting: [r for r in runs if r["model"] == model_name] for setting, runs in records.items()}
    parts = [f"### {model_name}", outcome_table(of_model["default"], 0.1)]
    for key, name in (("early_auc", "early AUC"), ("full_auc", "full AUC"), ("final_reward", "final training reward"),
                      ("heldout_reward", "held-out pass@1")):
        parts += [f"**{name}**, respo_wtilt minus baseline", paired_across(of_model, key, reference="respo_wtilt")]
    display(Markdown("\n\n".join(parts)))

# %% [markdown]
# Does the starvation appear during those runs? Averaged over the off-policy steps: the share
# of positives with $w<0.8$, their share of the positives' coefficient mass, and the mean
# $\phi$ one of them receives (dotted: 1, its on-policy weight). Every bar carries its value; a
# cell with no positive below 0.8 says "none" instead of a coefficient. The table adds how long
# the starved positives are against all positives; `nan` marks an empty set (no positive below
# 0.8) or, for `len_high_w_pos`, a statistic these runs did not record (research/README.md).

# %%
def low_w_panels(columns, title):
    """Per column (a cell's records): the low-w share and phi mass (top), the phi a low-w positive gets (bottom)."""
    fig, axes = plt.subplots(2, len(columns), figsize=(4.6 * len(columns), 6.4), sharey="row", squeeze=False)
    for col, (name, runs) in enumerate(columns.items()):
        here = [m for m in methods if any(r["method"] == m for r in runs)]
        x = torch.arange(len(here)).float()

        def mean_of(key):
            return [mean_ci([r[key] for r in runs if r["method"] == m])[0] for m in here]

        top, bottom = axes[0][col], axes[1][col]
        for shift, key, label in ((-0.2, "low_w_pos_frac", "share of positives with w < 0.8"),
                                  (0.2, "low_w_pos_phi_mass", "their share of the positives' φ mass")):
            values = mean_of(key)
            bars = top.bar(x + shift, values, 0.4, label=label, edgecolor="0.3", lw=0.5)
            top.bar_label(bars, labels=[f"{v:.1%}" for v in values], fontsize=8, padding=1, rotation=90)
        phi = mean_of("phi_low_w_pos")
        bars = bottom.bar(x, [0 if math.isnan(p) else p for p in phi], 0.6, color="tab:green", edgecolor="0.3", lw=0.5)
        bottom.bar_label(bars, labels=["none" if math.isnan(p) else f"{p:.2f}" for p in phi], fontsize=8, padding=1)
        bottom.axhline(1.0, color="k", ls=":", lw=1)
        top.set_title(name)
        top.margins(y=0.3)
        bottom.margins(y=0.15)
        top.set_xticks(x.tolist(), [])
        top.yaxis.set_major_formatter(PercentFormatter(1))
        bottom.set_xticks(x.tolist(), here, rotation=30)
    axes[0][0].set_ylabel("share")
    axes[1][0].set_ylabel("mean φ of one\nlow-w positive")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=2, bbox_to_anchor=(0.5, 0.94))   # above the bars, not on them
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    show_figure(fig)


for model_name in models:
    runs = [r for r in records["default"] if r["model"] == model_name]
    low_w_panels({cell_name(*cell): [r for r in runs if (r["reuse"], r["lag"]) == cell]
                  for cell in sorted({(r["reuse"], r["lag"]) for r in runs})}, f"{model_name}, default CPU setting")
    display(Markdown(diagnostics_table(runs)))

# %% [markdown]
# At the selected learning rates few positives fall below $w=0.8$ (the range over every cell,
# model and setting is printed below). The stress cell runs every method at the stress rate
# (reuse 8, dense), where the policy moves fast; both CPU settings side by side.

# %%
print(f"share of positives below w = 0.8, seed means per cell: selected lrs {figures.value('llm_low_w_share_selected')}, "
      f"stress cell {figures.value('llm_low_w_share_stress')} (research/figures.py)")
reward_panels({f"{setting} CPU setting": runs for setting, runs in stress.items()},
              f"tiny-qwen3, every method at lr {stress_lr:g}, R = 8")
low_w_panels({f"{setting} CPU setting": runs for setting, runs in stress.items()}, f"the stress cell, lr {stress_lr:g}")
parts = [outcome_table(stress["default"], 0.1)]
for key, name in (("full_auc", "full AUC"), ("heldout_reward", "held-out pass@1")):
    parts += [f"**{name}**, respo_wtilt minus baseline", paired_across(stress, key, reference="respo_wtilt")]
display(Markdown("\n\n".join(parts + [diagnostics_table(stress["default"])])))

# %% [markdown]
# ## 4. The main finding, in words
#
# Every figure below is computed from the committed records by `research/figures.py`, the
# same code that checks the numbers quoted in README.md and research/README.md.

# %%
for name in ("llm_low_w_share_selected", "llm_selected_gains", "llm_selected_gain_baselines",
             "llm_low_w_share_stress", "llm_len_low_w_stress", "llm_len_pos_stress", "llm_phi_low_w_stress_seq_clip",
             "llm_phi_low_w_stress_respo", "llm_stress_full_auc_beaten", "llm_stress_gspo_carried",
             "llm_stuck_stress_seq_clip", "llm_first_batch_identical"):
    print(f"{figures.value(name):>24}  {figures.FIGURES[name].what}")

# %% [markdown]
# Read them in order. At the learning rates each method scored best on selection seeds, few
# positives sit in the low-$w$ tail (§2's finding line counts them in its batches) and the
# only differences that hold on both settings are small ones against the baselines printed:
# against GRPO, at its own lower rate (the `lr` column of §3's outcome table), they compare recipes,
# not kernels; GSPO ran at ReSPO's rate, so those against it are kernel differences: in §3's
# difference tables the `gspo` rows whose last column says `respo_wtilt higher` (tiny-qwen3's early
# AUC at R = 4, tiny-qwen3-moe's full AUC at R = 4, lag 2), small and surviving no multiplicity
# correction (research/README.md). With every method at the
# stress rate the tail fills; the positives in it are longer than the average positive (the
# two length lines). A symmetric random drift would produce that too (§2's reference computes it):
# $\log w$ sums one log-ratio per token, so long responses fill *both* tails. Not every drift does
# so: in the `digit_sum` records below, the fallen positives are shorter than the risen ones in every
# one, and longer than the average positive only in the count printed there. This study did not
# record the high-$w$ lengths, so it cannot say the starved are the long ones; §2's retained-signal
# table measures what each length loses on three batches, and its reference shows that a drift with
# no pressure already makes the longest lose more. The sequence clip gives them its own small $w$ and ReSPO
# slightly above 1, and ReSPO's whole-curve reward is above the baselines printed but not above
# GSPO's.
#
# Why no early-optimisation claim is resolved: early AUC is the mean reward of the first three
# batches, and the first batch is sampled before any method acts, identical for every method in
# every seed group (the last line); in the lag-2 cells all three come from the initial weights,
# so early AUC is the same for every method there (the `4, lag 2` rows of §3's early-AUC
# tables, 0.000 ± 0.000 on both settings for both models); the differences that remain (the
# early-AUC rows marked `respo_wtilt higher`) are against GRPO and GSPO, and none survives a
# multiplicity correction over 8 seeds. Separately, the sequence clip's stuck runs in the stress cell do not
# travel between the two CPU settings (printed), so "the clip collapses" is not a finding
# either. These runs neither confirm nor refute the paper's claims (research/README.md gives the
# verdict per claim).
#
# *Takeaway:* read the coefficient tables, not only the curves: in every cell the coefficient a
# low-$w$ positive received is the one the derivation predicts (the clip's its own small $w$, well
# below 1; ReSPO's between 1 and $e^{\lambda_+}$); whether that moves the score depends on how many responses
# sit in the tails, which grows with the learning rate, the reuse and the length of the
# responses.
#
# ### The pre-registered test on `digit_sum`, and where it stopped
#
# The `reverse` study cannot decide the claims (its warm start leaves little to find), so a second
# one was designed for it: `digit_sum`, where every correct answer to a large target is long and,
# at the start, rare (research/README.md, Study 2). Its rules were committed before any run; its gates
# decide whether the evaluation runs at all. What its records give:

# %%
for name in ("digit_sum_gate1_shares", "digit_sum_gate1_success", "digit_sum_gate1_pass8", "digit_sum_lr_star",
             "digit_sum_gate2_share_r8", "digit_sum_gate2_share_fallbacks", "digit_sum_gate2_len_low",
             "digit_sum_gate2_len_high", "digit_sum_gate2_longer_low", "digit_sum_gate2_longer_than_all",
             "digit_sum_gate2_outcome", "reread_share_fallbacks", "reread_long_low", "reread_corr_log_w",
             "reread_excess_low", "reread_low_longer_pooled"):
    print(f"{figures.value(name):>24}  {figures.FIGURES[name].what}")
gate2 = [json.loads(p.read_text()) for p in sorted((ROOT / "research/results/gate2-amended").glob("*.json"))]
print("gate 2, record by record (research/results/gate2-amended/): CPU setting, R, lag | share of positives below "
      "0.8 | mean length of those, of the positives above 1.2, of all positives (tokens)")
for r in gate2:
    p = r["pooled"]
    print(f"  {r['cpu_setting']:<12} R = {r['config']['reuse']:>2}, lag {r['config']['lag']} | {p['low_w_pos_frac']:.1%} | "
          f"{p['len_low_w_pos']:.1f} / {p['len_high_w_pos']:.1f} / {p['len_pos']:.1f} | fallen minus all "
          f"{p['len_low_w_pos'] - p['len_pos']:+.3f}")
longer = [r for r in gate2 if r["pooled"]["len_low_w_pos"] > r["pooled"]["len_pos"]]     # full precision, no rounding
print(f"records whose fallen positives are longer than the average positive: {len(longer)} of {len(gate2)}, "
      f"{sum(r['pooled']['low_w_pos_frac'] >= 0.1 for r in longer)} of them with at least 10% below 0.8")
confirm("in every record the fallen positives are shorter than the risen ones",
        sum(r["pooled"]["len_low_w_pos"] >= r["pooled"]["len_high_w_pos"] for r in gate2), 1e-12)
confirm("the count of records with longer fallen positives is the one figures.py gives research/README.md",
        f"{len(longer)} of {len(gate2)}" != figures.value("digit_sum_gate2_longer_than_all"), 1e-12)

# %% [markdown]
# Read them as the gates do, and no further. The start has something to find: long correct
# answers are rare but found (gate 1). Gate 2 measured two things under the sequence clip with
# reuse and staleness. The share of positives below $w=0.8$: too small at $R=8$, enough only at
# some fallbacks (the records with at least 10%). And the length rule: whether the fallen
# positives are longer than those whose weight rose. In every record they are shorter than the
# risen ones (the first check); against the average positive they are longer in the records
# counted above at full precision, one of them a fallback with enough below 0.8, and not in the
# others. The records show neither that the drift spares long correct answers nor that it starves
# them. research/README.md's Study 2 reruns the same cells and reads them response by response (the
# `reread_` lines): positives do fall below 0.8 at the fallbacks, the long targets' too; how long
# the fallen ones are depends on the pooling (within a target, pooled per positive, pooled over seed
# means); and within a target a positive's length and its $\log w$ are uncorrelated, so this task
# shows no pressure specific to long answers. By the pre-registered rule the evaluation did not
# run, and the claims stay not resolved, neither supported nor refuted.
#
# The lesson for reading any such gate: **a gate falsifies only the mechanism it encodes.**
# This one encoded "the low-$w$ positives are longer than the high-$w$ ones", a comparison of the
# two tails' pooled lengths, which mostly says which targets' positives drift. One more reason it
# could fail is a conjecture here: that a positive's own update raises its $\log\pi$ more the longer
# it is (for plain gradient descent, by about $\eta A\|\nabla\log\pi\|^2$ at first order). Under Adam
# the step is not $\eta$ times the gradient, and within a target the reruns show no rise of
# $\log w$ with length (the correlation printed above), so nothing here checks it. The gate rules out
# its pattern on this task; it cannot rule out starvation where some update pushes long correct
# answers down, which notebooks/deeper/branches_explored §6 builds exactly and Study 3 tried to build on this model.
#
# ### Study 3: `digit_conflict`, and its verdict
#
# `digit_conflict` trains short rewarded answers (`sum t`, in at most $\lceil t/3\rceil+1$ digits) beside
# long ones (`ones t`, 1s and 2s only) over the same digits, so that the short family's updates might
# push the long family's answers down. Its manipulation check, gate A, was fixed before its first
# record (research/MECHANISM.md): under the sequence clip with a lag, the `ones` positives must
# drift at least 0.01 per token below the `sum` positives and fall below $w=0.8$ at least 15% of the
# time and 3x as often as the `sum` ones; if it fails at lag 4 and at lag 8, the study reports that
# the mechanism cannot be produced on this model and compares no method. Its records, read by the
# code that writes research/README.md's Study 3:

# %%
from research import conflict_report, mechanism_figures as mechanism  # noqa: E402  (what figures.py reads)

for name in ("conflict_gate1_share", "conflict_lr_star", "conflict_gate_a_ones_low", "conflict_gate_a_sum_low",
             "conflict_gate_a_ratio", "conflict_gate_a_drift_ones", "conflict_gate_a_drift_sum",
             "conflict_gate_a_control_gap", "conflict_gate_a_ones_distinct", "conflict_gate_a_sum_lower",
             "conflict_retained_seq_clip", "conflict_retained_least_bin", "conflict_retained_respo_wtilt",
             "conflict_gate_a_outcome"):
    print(f"{figures.value(name):>28}  {figures.FIGURES[name].what}")
display(Markdown(conflict_report.gate_a_table(mechanism.conflict_records())))
confirm("no gate A cell passed, at either lag on either setting (so no method was compared)",
        sum(g["passed"] for g in mechanism.gate_a_cells()), 1e-12)

# %% [markdown]
# By the rule written in advance, the mechanism cannot be produced on this model. The `ones`
# positives do fall below 0.8, but less than 3x as often as the `sum` positives (the ratio printed),
# which drift further per token and have the lower mean $\log w$ in most cells (printed): the drift
# is not specific to the long family. The sequence clip still discards much of both families' signal
# (its $R_m$ range above, least kept in the bin printed), but, as §2's reference shows, a loss by
# length is not by itself a pressure on length, and whether this loss costs learning was not tested.
# What this notebook shows on its batches, the coefficient each method gives a positive that fell,
# holds on any batch; that on this model the fallen ones are the long ones, or that losing them
# costs learning, the committed studies do not show.
#
# ## 5. Exercises
#
# **Exercise 1: find and read the highest-$w$ negative.** In the batch §2 reads at the stress rate,
# which row is the wrong answer (negative advantage) with the largest $w$? Find it from
# `views[stress_lr]` (its `adv`, `log_w`), put its row index below and run the check; then
# print its prompt and response, compare the response with the right answer, and read what
# each method gives it (the table function `show` takes a view and rows). §1's summary counts
# no negative above $w=1.2$ in any batch (the check under it): say from the clip table why a negative that drifts
# above $1+\epsilon$ does not stay there under the sequence clip, and what that leaves the
# negative branches of the other methods to act on in this batch.

# %%
my_high_w_negative = None  # your answer: a row index of views[stress_lr]
checks.check_high_w_negative(my_high_w_negative, views[stress_lr]["log_w"], views[stress_lr]["adv"])

# %% [markdown]
# **Exercise 2: a coefficient by hand.** Write the coefficient the sequence clip and ReSPO's
# published kernel (`respo`, not the reconstruction `respo_wtilt` the studies ran) give one
# response of the batch, from its token log-probs under $\pi$ and $\mu$, its mask and its
# advantage, without calling the kernel. The check runs your function on responses of the
# batch (and on copies shifted to other weights) and compares it with `kernel.coefficients`.

# %%
def my_coefficient(logp, old_logp, mask, advantage, method):
    """phi of one response: logp, old_logp [C] token log-probs under pi and mu, mask [C] bool, advantage a float,
    method "seq_clip" or "respo" (the published kernel, at LossConfig()'s defaults). Returns a float."""
    return None  # your code


v = views[stress_lr]
checks.check_coefficient_by_hand(my_coefficient, v["logp"], v["old_logp"], v["mask"], v["adv"])

# %% [markdown]
# ## 6. Quick questions
#
# 1. §2's batches starved far fewer positives at the selected rate than at the stress rate.
#    Why does a few-times larger step do that, and why would long answers go first?
#    <details><summary>Answer</summary>Each update moves every token's log-prob by an amount that
#    grows with the step; $\log w=\sum_td_t$ adds those moves over the response, so the spread of
#    $\log w$ grows with the step and, a sum of more terms, with the length: long responses are
#    likelier to reach either tail. A likelihood, not a rule: which lengths lose signal is what
#    §2's retained-signal table reads on its batches, both tails counted; its symmetric-drift
#    reference shows that spread alone makes the longest lose more, so a loss by length does not
#    say the starved are the long ones because something pushed them (§4).</details>
# 2. A group has $k$ right answers of 8 and the wrong ones share the right answer's first
#    digits. On-policy, does pushing the wrong ones down push that prefix down?
#    <details><summary>Answer</summary>No: the net push on a shared prefix is the sum of $A$ over
#    the responses sharing it, $\tfrac k8(8-k-m)\ge0$ with $m$ the wrong answers sharing it; it
#    is zero only where every wrong answer shares it (§2's printout). Off-policy the shared
#    parameters can still move it, which is why §2 measures where $d_t$ fell.</details>
# 3. Which tokens of a correct answer does GRPO's token clip zero, and which does it keep?
#    <details><summary>Answer</summary>For $A>0$ the clip is active where $r_t>1+\epsilon$: those
#    tokens get 0. A token whose ratio fell keeps its $r_t$ (the min picks the unclipped term), so
#    a starved correct answer keeps most of its gradient under GRPO (§2's breakdown).</details>
# 4. GSPO gives a 30-token correct answer the value $s$. What did its tokens do?
#    <details><summary>Answer</summary>$s=w^{1/|y|}$ is the geometric mean of the token ratios:
#    each token's probability changed by a factor $s$ on average, a fall by $1/s$ if $s<1$. A
#    value that looks like "about half" is a large per-token fall, and $w=s^{30}$ (§2).</details>
# 5. What does `--lag 2` change about $w$ at the first optimizer step on a batch?
#    <details><summary>Answer</summary>The batch was sampled by the policy of two batches
#    earlier, so $\log\mu$ is that policy's and $w=\pi_{\rm now}/\mu$ is not 1 even before any
#    step on it; the reuse steps then add their drift: $w$ folds staleness and reuse (§3).</details>
#
# ## Where this comes from
#
# - The model and task: Qwen3's architecture (`transformers`' Qwen3 and Qwen3-MoE classes, built tiny and
#   offline here); the reverse task and the warm start are this project's (docs/training.md).
# - The loop `rl_iteration` runs: GRPO's group advantages (arXiv:2402.03300) with PPO-style epochs ×
#   mini-batches (arXiv:1707.06347); the methods compared: the sequence clip, GRPO, GSPO
#   (arXiv:2507.18071), CISPO (arXiv:2506.13585), VESPO (arXiv:2602.10693), TOPR (arXiv:2503.14286).
# - `--lag` as asynchronous staleness: IMPALA's actors behind the learner (Espeholt et al., ICML 2018).
# - Pre-registered gates before an evaluation, and the paired seeds and sign-flip tests of
#   research/README.md: this project's protocol (research/PREREGISTRATION.md).
# - The retained-signal-by-length statistic and the shared-prefix test: this course's.
#
# One line per work: [docs/bibliography.md](../../docs/bibliography.md).

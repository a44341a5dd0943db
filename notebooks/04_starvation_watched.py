# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 04 · Starvation, watched
#
# **The question.** Core 01 said reuse makes $w$ drift and core 02 that each method is a
# coefficient of $w$. When a policy really learns, which correct answers end up low-$w$, what
# does each method then give them, and what does that cost?
#
# **The answer.** A step that pushes every correct answer up still lowers some of them: the
# positives share weights, and at first order a positive whose gradient points against the
# batch's push loses probability. Under reuse some positives end low-$w$ (how many is set by the step's
# length more than by this count, §2), and the sequence clip gives each its $w$, so at most steps it keeps under 0.6 of the positives' push where the published
# ReSPO keeps more at every step. On the other side ReSPO gives an over-generated wrong answer less than
# ignoring $w$ would ($\phi=1$) and less than the exact weight ($\phi=w$); below $W=1$ it pushes a
# wrong answer down harder than on-policy, where the clip gives 0. Last, an exact case with
# nothing sampled: under plain gradient steps a rare long correct answer falls furthest under
# ReSPO, mostly through that push below 1 on wrong answers sharing its prefix; under Adam the
# order reverses.
#
# Words as in core 01: **drifted** ($w\ne1$), **under-generated** or **low-$w$** ($w<0.8$,
# below the clip band), **over-generated** ($w>1.2$), **starved** (an under-generated correct
# answer a method gives a vanishing coefficient). Every mechanism sentence below is checked on two
# warm policies, printed side by side; what holds on one batch only says so.
#
# ## 1. Two warm policies, five batches each
#
# The digit-sum bandit of `toy/` (a target $t$; the policy writes digits 0–3 and an end token;
# reward 1 when the digits sum to $t$). Two policies are warmed up as `research/notebooks/starvation_controls`
# §1 warms its one, with warm-up seeds 1 and 2 (15 rollout batches of reuse, the reconstruction
# `respo_wtilt`, under `seq-mean-token-sum-norm` as its records were). From each we draw five
# batches of 32 prompts × 8 responses and take 8 full-batch sequence-clip steps on each batch
# (Adam, lr 0.01), recording every response's $\log w$ before each step.

# %%
import copy
import math

import matplotlib.pyplot as plt
import torch

from course import EndedSpace, confirm
from nano_respo.kernel import LossConfig, coefficients, group_advantages, policy_loss, respo_coefficient, sequence_log_weight
from toy.envs import DigitSum

torch.set_num_threads(1)
plt.rcParams.update({"figure.dpi": 100, "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})
AGG = "seq-mean-token-sum-norm"  # the warm-up's and the drift's aggregation, as in research/notebooks/starvation_controls
LOW, HIGH = math.log(0.8), math.log(1.2)
env = DigitSum()


def warm_policy(seed):
    """research/notebooks/starvation_controls §1's warm-up: 15 rollout batches of 16 prompts x 8, each reused as 4 mini-batches."""
    torch.manual_seed(seed)
    policy = env.make_policy()
    # the reconstruction respo_wtilt: VESPO's family at its constants (0, 0.1) on positives, (3, 2) on negatives
    cfg = LossConfig(method="vespo", agg=AGG, vespo_k_pos=0.0, vespo_lambda_pos=0.1, vespo_k_neg=3.0, vespo_lambda_neg=2.0)
    optimizer = torch.optim.Adam(policy.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(15):
        prompts = env.train_prompts[torch.randint(len(env.train_prompts), (16,), generator=generator)].repeat_interleave(8)
        batch = env.sample(policy, prompts, generator)
        adv, _ = group_advantages(env.reward(batch), 8)
        for groups in torch.randperm(16, generator=generator).view(4, -1):
            rows = (groups[:, None] * 8 + torch.arange(8)).reshape(-1)
            part = batch[rows]
            loss, _ = policy_loss(env.log_probs(policy, part), part.old_logp, adv[rows], part.mask, cfg)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
            optimizer.step()
    return policy


def draw_batch(policy, seed):
    """32 prompts x 8 responses from `policy` and their group advantages."""
    generator = torch.Generator().manual_seed(seed)
    prompts = env.train_prompts[torch.randint(len(env.train_prompts), (32,), generator=generator)].repeat_interleave(8)
    batch = env.sample(policy, prompts, generator)
    return batch, group_advantages(env.reward(batch), 8)[0]


def clip_drift(policy, batch, adv, steps=8):
    """A copy of `policy` takes `steps` full-batch sequence-clip steps on `batch`; [steps, B] log w before each."""
    learner = copy.deepcopy(policy)
    optimizer = torch.optim.Adam(learner.parameters(), lr=0.01)
    cfg = LossConfig(method="seq_clip", agg=AGG)
    seen = []
    for _ in range(steps):
        logp = env.log_probs(learner, batch)
        seen.append(logp.detach())
        loss, _ = policy_loss(logp, batch.old_logp, adv, batch.mask, cfg)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(learner.parameters(), 1.0)
        optimizer.step()
    return torch.stack(seen)


POLICY_BATCHES = {1: (6, 7, 8, 9, 10), 2: (16, 17, 18, 19, 20)}   # warm-up seed: batch seeds
policies = {seed: warm_policy(seed) for seed in POLICY_BATCHES}
batches = {(p, b): draw_batch(policies[p], b) for p, seeds in POLICY_BATCHES.items() for b in seeds}
drifts = {key: clip_drift(policies[key[0]], *batch) for key, batch in batches.items()}
for p, seeds in POLICY_BATCHES.items():
    print(f"warm policy {p}, batches {seeds}: reward " + " ".join(f"{env.reward(batches[p, b][0]).mean():.2f}" for b in seeds))

# %% [markdown]
# ## 2. The first-order count: a push up lowers some positives
#
# A step $\Delta\theta$ changes response $j$'s $\log\pi$ by $\langle\nabla\log\pi_j,\Delta\theta\rangle$ to first
# order. Push the positives alone, $\Delta\theta=\eta\sum_{i:A_i>0}A_i\nabla\log\pi_i$: positive $j$ gains
# $\eta A_j\|\nabla\log\pi_j\|^2$ from its own term and $\eta\sum_{i\ne j}A_i\langle\nabla\log\pi_j,\nabla\log\pi_i\rangle$
# from the others, which is negative when its gradient points against theirs. The cell counts,
# per batch, the positives whose first-order change is negative (per-response gradients by
# autograd), and on each policy's first batch checks the count against a tiny real step.

# %%
def response_gradients(policy, batch):
    """[B, P] grad log pi(y) of every response (autograd, one response at a time)."""
    params = list(policy.parameters())
    seq_logp = (env.log_probs(policy, batch) * batch.mask).sum(-1)
    return torch.stack([torch.cat([g.reshape(-1) for g in torch.autograd.grad(seq_logp[i], params, retain_graph=True)])
                        for i in range(len(seq_logp))])


falling, low_after = {}, {}
for (p, b), (batch, adv) in batches.items():
    positive = adv > 0
    grads = response_gradients(policies[p], batch)
    push = (adv * positive) @ grads
    falling[p, b] = positive & (grads @ push < 0)
    low_after[p, b] = positive & (sequence_log_weight(drifts[p, b][4], batch.old_logp, batch.mask) < LOW)
    if b == POLICY_BATCHES[p][0]:
        tiny = copy.deepcopy(policies[p])
        start = torch.nn.utils.parameters_to_vector(tiny.parameters()).detach()
        torch.nn.utils.vector_to_parameters(start + 1e-4 * push / push.norm(), tiny.parameters())
        moved = sequence_log_weight(env.log_probs(tiny, batch).detach(), batch.old_logp, batch.mask)
        confirm(f"policy {p}, batch {b}: a step of length 1e-4 along the positives' push lowers exactly the positives "
                "the first-order count names", ((positive & (moved < 0)) != falling[p, b]).sum().item(), 1e-12)
print("per batch: positives falling at first order / positives | low-w positives after 4 clip steps")
for i in range(5):
    print("   ".join(f"policy {p}, batch {POLICY_BATCHES[p][i]:>2}: {int(falling[p, POLICY_BATCHES[p][i]].sum()):>2} / "
                     f"{int((batches[p, POLICY_BATCHES[p][i]][1] > 0).sum()):>2} | {int(low_after[p, POLICY_BATCHES[p][i]].sum()):>2}"
                     for p in POLICY_BATCHES))
confirm("on every batch of both policies some positives fall at first order under a push on the positives alone",
        sum(int(f.sum()) == 0 for f in falling.values()), 1e-12)
confirm("row by row, policy 2's batch has fewer positives falling at first order than policy 1's and more low-w "
        "positives after 4 clip steps", sum(int(falling[2, b2].sum()) >= int(falling[1, b1].sum())
                                             or int(low_after[2, b2].sum()) <= int(low_after[1, b1].sum())
                                             for b1, b2 in zip(*POLICY_BATCHES.values())), 1e-12)

# %% [markdown]
# Interference at first order is there on every batch of both policies (the check), but how
# much differs: policy 1 lowers about a third of its positives, policy 2 a few (the columns).
# How many positives then end low-$w$ is not the first-order count: after 4 steps policy 2 has
# more of them, not fewer (the second check). Adam's first step is about lr on every weight whatever the gradient,
# beyond the linear regime at lr 0.01; `research/notebooks/starvation_controls` §2 runs the controls on
# policy 1 (positives alone, SGD of Adam's step length, a learning-rate sweep) and finds that
# the step's length decides how many cross 0.8, and that a starved positive's own term brings it
# back unless the negatives keep being pushed.
#
# ## 3. The symptom: what each method keeps of the positives' push
#
# At each step after the first, ask three kernels for their coefficient on the same drifted
# batch (for the token clip, GRPO's, the mean over the response's tokens) and sum $\phi_iA_i$ over
# the positives, as a share of $\sum A_i$, what $\phi=1$ would give: the share of the positives'
# push the method keeps.

# %%
KEPT_METHODS = {"seq_clip": "tab:blue", "respo": "tab:red", "grpo": "tab:green"}


def per_response(logp, batch, adv, method):
    """Each response's coefficient (a token method's: its mean over the response's tokens)."""
    phi, _ = coefficients(logp, batch.old_logp, adv, batch.mask, LossConfig(method=method))
    return (phi * batch.mask).sum(-1) / batch.mask.sum(-1)


kept = {}
for key, (batch, adv) in batches.items():
    positive = adv > 0
    for method in KEPT_METHODS:
        kept[key, method] = torch.tensor([((per_response(logp, batch, adv, method) * adv)[positive].sum()
                                           / adv[positive].sum()).item() for logp in drifts[key][1:]])
fig, axes = plt.subplots(1, 2, figsize=(9, 3), sharey=True)
for ax, p in zip(axes, POLICY_BATCHES):
    for method, colour in KEPT_METHODS.items():
        for b in POLICY_BATCHES[p]:
            ax.plot(range(2, 9), kept[(p, b), method], color=colour, alpha=0.6, label=method if b == POLICY_BATCHES[p][0] else None)
    ax.axhline(1, color="0.4", ls=":", lw=1)
    ax.set(xlabel="clip step", title=f"warm policy {p}: share of the positives' push kept")
axes[0].set_ylabel("Σ φA over positives / Σ A")
axes[0].legend(fontsize=7)
fig.tight_layout()
plt.show()
for p in POLICY_BATCHES:
    print(f"policy {p}, steps 2-8 on 5 batches: " + ", ".join(
        f"{m} {min(kept[(p, b), m].min().item() for b in POLICY_BATCHES[p]):.2f}-"
        f"{max(kept[(p, b), m].max().item() for b in POLICY_BATCHES[p]):.2f}" for m in KEPT_METHODS))
confirm("at every step on every batch of both policies ReSPO keeps more of the positives' push than the sequence clip",
        sum(int((kept[key, "respo"] <= kept[key, "seq_clip"]).sum()) for key in batches), 1e-12)
confirm("the sequence clip keeps under 0.6 of it at most steps of every batch of both policies",
        sum(int((kept[key, "seq_clip"] >= 0.6).sum()) > 3 for key in batches), 1e-12)

# %% [markdown]
# The clip gives a low-$w$ positive its $w$ and an over-generated one 0, so it keeps under 0.6 of
# the push at most steps on both policies (the second check; the ranges printed). ReSPO keeps
# more at every step of every batch (the first check): its positive branch
# $\phi_+=\frac{1+W}2e^{1-W}$ is above 1 for every $W<1$ (core 02). The token clip keeps much of it
# too, for another reason: each token's ratio drifts little, so few tokens leave the band. What a
# larger own term buys over many steps is `research/notebooks/starvation_controls` §4 (the reconstruction's
# arms on policy 1, with a control that gives only the low-$w$ positives 1).
#
# ## 4. The negative branch, on both sides of $W=1$
#
# The paper's abstract gives $\phi_-$ one job: it "suppresses heavily over-generated negative
# responses". A wrong answer the learner now writes more often than the sampler did ($w>1.2$) is
# the one an update should push down. Two references: $\phi=1$ (ignore $w$) and $\phi=w$ (the exact
# importance weight). The sequence clip gives such a negative $w$ (its pessimistic side has no
# ceiling for $A<0$). ReSPO's negative branch $\phi_-(W)=\sqrt W\,e^{2(1-\sqrt W)}$ is below both
# for every $W>1$, and above $W$ for every $W<1$ (its peak, $e/2$ at $W=1/4$, is on the
# under-generated side):

# %%
grid = torch.linspace(-6, 6, 12001, dtype=torch.float64)
phi_minus = respo_coefficient(grid, torch.zeros_like(grid, dtype=torch.bool))
over, under = grid > 1e-9, grid < -1e-9
confirm("phi_- < 1 and phi_- < W for every W > 1 (log W up to 6)",
        max(0.0, (phi_minus[over] - 1).max().item(), (phi_minus[over] - grid[over].exp()).max().item()), 1e-12)
confirm("phi_- > W for every W < 1 (log W down to -6): not below the exact weight on the under-generated side",
        max(0.0, (grid[under].exp() - phi_minus[under]).max().item()), 1e-12)
given = {}
for key, (batch, adv) in batches.items():
    log_w = sequence_log_weight(drifts[key][4], batch.old_logp, batch.mask)
    rows = (adv < 0) & (log_w > HIGH)
    given[key] = (int(rows.sum()), log_w[rows].exp(),
                  {m: per_response(drifts[key][4], batch, adv, m)[rows] for m in KEPT_METHODS})
print("after 4 clip steps, over-generated negatives per batch: count, then mean w | mean phi of the clip, ReSPO, GRPO")
for i in range(5):
    cells = []
    for p in POLICY_BATCHES:
        n, w, phis = given[p, POLICY_BATCHES[p][i]]
        cells.append(f"policy {p}: {n:>2}" + (f", w {w.mean():.2f} | " + " ".join(f"{phis[m].mean():.2f}" for m in KEPT_METHODS)
                                              if n else " " * 27))
    print("   ".join(cells))
confirm("on every batch of both policies ReSPO gives each over-generated negative less than 1 and less than its w, "
        "the clip exactly its w", max(0.0, *(max((phis["respo"] - 1).max().item(), (phis["respo"] - w).max().item(),
                                                  (phis["seq_clip"] - w).abs().max().item())
                                              for n, w, phis in given.values() if n)), 1e-6)
fig, ax = plt.subplots(figsize=(6, 3))
w_axis = grid.exp()
ax.plot(w_axis, phi_minus, color="tab:red", lw=2, label="ReSPO φ₋")
ax.plot(w_axis, w_axis, ":", color="0.3", label="φ = w (exact)")
ax.axhline(1, color="0.6", ls="--", lw=1, label="φ = 1 (w ignored)")
for key, (n, w, phis) in given.items():
    if n:
        ax.scatter(w, phis["respo"], s=12, color="tab:red" if key[0] == 1 else "tab:purple", zorder=3)
ax.set(xscale="log", xlim=(0.05, 8), ylim=(0, 3), xlabel="w", ylabel="coefficient of a negative",
       title="negatives: ReSPO against both references (dots: over-generated, policy 1 red, 2 purple)")
ax.legend(fontsize=7)
fig.tight_layout()
plt.show()

# %% [markdown]
# Policy 1 has over-generated negatives on every batch, policy 2 a few or none (the counts): how
# many there are is the draw's, what each method gives them is the kernel's. ReSPO pushes them
# down less than either reference: that is the suppression the abstract names, a bound on how
# much an over-generated failure weighs, not a harder push. It is no trust region (docs/math.md
# §2): the step moves their $W$ back towards 1. The reconstruction's negative branch raised them
# against $\phi=1$ (`research/notebooks/starvation_controls` §5 reads that on policy 1).
#
# The shape does more than the abstract says. Below $W=1$ a negative step lowers $W$ further,
# which is the cell where the clip's trust region gives 0 ($W<0.8$). There $\phi_-$ is above 1, a
# harder push than on-policy, with its peak $e/2$ at $W=1/4$; VESPO's negative branch
# $W^3e^{-2(W-1)}$ nearly zeroes the same cell. Against the clip and VESPO, on a grid:

# %%
def negative_coefficient(method, log_w):
    """The kernel's coefficient of a one-token wrong answer (A = -1) whose weight is exp(log_w)."""
    phi, _ = coefficients(log_w[:, None], torch.zeros(len(log_w), 1, dtype=log_w.dtype), -torch.ones(len(log_w)),
                          torch.ones(len(log_w), 1, dtype=torch.bool), LossConfig(method=method))
    return phi[:, 0]


below = {m: negative_coefficient(m, grid) for m in ("respo", "seq_clip", "vespo")}
band = (grid.exp() > 0.05) & (grid.exp() < 0.999)
quarter = torch.tensor([math.log(0.25)], dtype=torch.float64)
at_quarter = {m: negative_coefficient(m, quarter).item() for m in below}
print("a wrong answer at W = 1/4: " + ", ".join(f"{m} {v:.3f}" for m, v in at_quarter.items())
      + f"; e/2 = {math.e / 2:.3f}; ReSPO's largest on the grid at W = {grid[below['respo'].argmax()].exp():.3f}")
confirm("phi_- > 1 for every W in (0.05, 1)",
        max(0.0, (1 - below["respo"][band]).max().item()), 1e-12)
rising = (grid.exp() > 0.25) & (grid.exp() < 1)
confirm("phi_- peaks at W = 1/4 with e/2, rising as W falls from 1 to there; the clip gives 0 there, VESPO under 0.1",
        max(abs(at_quarter["respo"] - math.e / 2), abs(grid[below["respo"].argmax()].exp().item() - 0.25),
            max(0.0, below["respo"][rising].diff().max().item()),
            at_quarter["seq_clip"], max(0.0, at_quarter["vespo"] - 0.1)), 1e-3)
fig, ax = plt.subplots(figsize=(6, 2.6))
for m, colour in (("respo", "tab:red"), ("seq_clip", "tab:blue"), ("vespo", "tab:brown")):
    ax.plot(grid.exp(), below[m], color=colour, label=m)
ax.axhline(1, color="0.6", ls="--", lw=1, label="φ = 1")
ax.axvspan(0.8, 1.2, color="0.9", label="clip band")
ax.set(xscale="log", xlim=(0.01, 8), ylim=(0, 2), xlabel="W", ylabel="coefficient of a negative",
       title="the negative branch: ReSPO, the sequence clip, VESPO")
ax.legend(fontsize=7)
fig.tight_layout()
plt.show()

# %% [markdown]
# So below $W=1$ the published $\phi_-$ removes the clip's trust region for negatives and pushes
# harder than on-policy; only its fall to 0 as $W\to0$ (below 0.05) bounds the push. As a wrong
# answer's $W$ falls from 1 to 1/4 its coefficient rises (the curve, the second check), so each step
# pushes it harder than the last until it passes the peak. What that costs
# depends on what the wrong answer shares with a correct one and on the optimizer: §6 plants a case
# where it costs a rare correct answer under plain gradient steps, and not under Adam.
#
# ## 5. A real batch, read as text
#
# The tiny Qwen3 (`tiny-qwen3`, 0.3M parameters, character tokenizer) after its shipped warm
# start, on the `reverse` task ("reverse 48213" → "31284"). One rollout batch of 16 prompts × 8,
# then the 8 sequence-clip steps `train.py --method seq_clip --reuse 8 --epochs 2` takes, at the
# committed study's stress learning rate 3e-4 (not `train.py`'s default 1e-4, at which few
# responses drift in one batch). We print this batch's lowest-$w$ correct answer and its
# highest-$w$ wrong one.

# %%
import contextlib  # noqa: E402
import io  # noqa: E402

from nano_respo.config import TrainConfig  # noqa: E402
from nano_respo.rollout import policy_logprobs  # noqa: E402
from nano_respo.run.session import build_task, initial_model  # noqa: E402
from nano_respo.trainer import rl_iteration  # noqa: E402

cfg = TrainConfig(model="tiny-qwen3", task="reverse", loss=LossConfig(method="seq_clip", agg=AGG), reuse=8, epochs=2,
                  prompts_per_iteration=16, lr=3e-4, seed=0)
task = build_task(cfg)
torch.manual_seed(cfg.seed)
with contextlib.redirect_stdout(io.StringIO()):            # the warm start prints where it comes from (shipped)
    model, tokenizer = initial_model(cfg, task, "cpu", policy_logprobs)
optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
qwen_batch, _, _ = rl_iteration(model, tokenizer, task, optimizer, cfg, iteration=0, step=0)
with torch.no_grad():
    qwen_logp, _, _ = policy_logprobs(model, qwen_batch, cfg.temperature)
mask, qwen_adv = qwen_batch.completion_mask, qwen_batch.advantages
qwen_log_w = sequence_log_weight(qwen_logp, qwen_batch.old_logp, mask)
width = mask.shape[1]
texts = tokenizer.batch_decode(torch.where(mask, qwen_batch.input_ids[:, -width:], tokenizer.pad_token_id),
                               skip_special_tokens=True)
prompts = tokenizer.batch_decode(qwen_batch.input_ids[:, :-width], skip_special_tokens=True)
qwen_phi = {m: coefficients(qwen_logp, qwen_batch.old_logp, qwen_adv, mask, LossConfig(method=m))[0]
            for m in ("seq_clip", "respo")}
print(f"this batch: {int((qwen_adv > 0).sum())} positives, {int(((qwen_adv > 0) & (qwen_log_w < LOW)).sum())} of them "
      f"low-w; {int((qwen_adv < 0).sum())} negatives, {int(((qwen_adv < 0) & (qwen_log_w > HIGH)).sum())} over-generated")
for name, sign in (("lowest-w correct answer", 1), ("highest-w wrong answer", -1)):
    rows = qwen_adv * sign > 0
    i = int(torch.where(rows, qwen_log_w * sign, torch.full_like(qwen_log_w, math.inf)).argmin()) if sign > 0 else \
        int(torch.where(rows, qwen_log_w, torch.full_like(qwen_log_w, -math.inf)).argmax())
    print(f"{name}: {prompts[i].strip()!r} -> {texts[i].strip()!r}  A {qwen_adv[i]:+.2f}, w {qwen_log_w[i].exp():.2f}, "
          f"{int(mask[i].sum())} tokens; phi: clip {qwen_phi['seq_clip'][i, 0]:.2f}, ReSPO {qwen_phi['respo'][i, 0]:.2f}")

# %% [markdown]
# On this batch the printout says how far the worst-placed correct answer fell and what each
# method gives it; it is one batch at one rate, not a rate of starvation. How often positives
# fall below 0.8 across the committed study's runs, and what every method gave them there, is
# `research/notebooks/tiny_qwen3_records` §1-§3 (the reconstruction's records); the study's own reading of
# whether the mechanism showed on this model is its §4.
#
# ## 6. The consequence, exactly: a rare long correct answer (plain steps lower it most under ReSPO; Adam reverses it)
#
# `deeper/branches_explored` §6 plants the mechanism with nothing sampled: responses of 0 to 7
# binary tokens then an end token, two correct ones, the short `1E` that $\mu$ writes often and the
# long `1111111E` ($y^*$) it writes about once in a thousand. Wrong answers starting with `1` share
# $y^*$'s first token. Each arm takes 16 steps on its *exact* expected gradient with $\mu$ fixed, one
# infinitely large batch reused, under plain gradient steps (SGD, lr 2) and under Adam (lr 0.05, the
# optimizer every trainer here and the paper use). Two arms swap one branch: ReSPO's coefficient on
# the positives with the clip's on the negatives, and the reverse. Before step 4 the cell splits
# the component of the SGD step towards $y^*$, $\langle g,\nabla\log\pi(y^*)\rangle$, by the responses it
# comes from:

# %%
ended = EndedSpace(vocab=2, max_len=8)
star, short = (1,) * 7 + (ended.end,), (1, ended.end)
i_star, i_short = ended.index(star), ended.index(short)
theta_mu = ended.logits_from_probs({(): (0.3, 0.6, 0.1), (1,): (0.1, 0.4, 0.5),
                                    **{(1,) * k: (0.35, 0.35, 0.3) for k in range(2, 7)}})
logp_mu = ended.token_log_probs(theta_mu)
mu = logp_mu.sum(-1).exp()
reward = torch.tensor([float(s in (star, short)) for s in ended.seqs], dtype=torch.float64)
exact_adv = reward - (mu * reward).sum()
wrong_sharing_1 = torch.tensor([s[0] == 1 for s in ended.seqs]) & (reward == 0)
ARMS = {"seq_clip": ("seq_clip", "seq_clip"), "respo": ("respo", "respo"),
        "respo +, clip -": ("respo", "seq_clip"), "clip +, respo -": ("seq_clip", "respo")}


def exact_reuse(positives, negatives, optimizer="sgd", steps=16, split_at=3):
    """pi(y*) and y*'s coefficient before each step; the component towards y* by response before step split_at + 1."""
    theta = theta_mu.clone().requires_grad_(True)
    opt = torch.optim.SGD([theta], lr=2.0) if optimizer == "sgd" else torch.optim.Adam([theta], lr=0.05)
    rows, split = [], None
    for step in range(steps):
        logp = ended.token_log_probs(theta)
        phi = torch.where((exact_adv > 0)[:, None],
                          coefficients(logp.detach(), logp_mu, exact_adv, ended.mask, LossConfig(method=positives))[0],
                          coefficients(logp.detach(), logp_mu, exact_adv, ended.mask, LossConfig(method=negatives))[0])
        rows.append((logp[i_star].sum().exp().item(), phi[i_star].mean().item()))
        if step == split_at:  # response i's part: mu_i A_i sum_t phi_t <grad log pi_t, grad log pi(y*)>
            jac = torch.autograd.functional.jacobian(ended.token_log_probs, theta.detach(), vectorize=True)  # [N, L, P]
            split = mu * exact_adv * (phi * (jac @ jac[i_star].sum(0))).sum(-1)
        objective = (mu[:, None] * phi * exact_adv[:, None] * logp).sum()
        opt.zero_grad()
        (-objective).backward()
        opt.step()
    return rows, split


exact = {(arm, opt): exact_reuse(*ARMS[arm], optimizer=opt) for arm in ARMS for opt in ("sgd", "adam")}
fig, axes = plt.subplots(1, 2, figsize=(9, 2.8))
for ax, opt in zip(axes, ("sgd", "adam")):
    for arm, colour in (("seq_clip", "tab:blue"), ("respo", "tab:red"), ("respo +, clip -", "tab:orange"),
                        ("clip +, respo -", "tab:purple")):
        ax.plot(range(1, 17), [p * 1e3 for p, _ in exact[arm, opt][0]], "o-", ms=3, color=colour, label=arm)
    ax.axhline(mu[i_star].item() * 1e3, color="0.5", ls=":", lw=1)
    ax.set(xlabel="step R", ylabel="π(1111111E) × 1e3", title=f"{opt}: the rare long correct answer (dotted: μ)")
axes[0].legend(fontsize=7)
fig.tight_layout()
plt.show()
print(f"mu(y*) x 1e3 = {mu[i_star] * 1e3:.2f}; at R = 16, pi(y*) x 1e3 under SGD | Adam, and phi(y*) under SGD:")
for arm in ARMS:
    print(f"  {arm:<16} {exact[arm, 'sgd'][0][-1][0] * 1e3:6.2f} | {exact[arm, 'adam'][0][-1][0] * 1e3:6.2f}   "
          f"phi {exact[arm, 'sgd'][0][-1][1]:.2f}")
print("SGD, before step 4, component towards y* x 100 = 1E | y* | wrong answers starting with 1 | other wrong answers")
for arm in ("seq_clip", "respo"):
    part = exact[arm, "sgd"][1]
    print(f"  {arm:<9} {part.sum() * 100:+6.2f} = {part[i_short] * 100:+6.2f} | {part[i_star] * 100:+6.2f} | "
          f"{part[wrong_sharing_1].sum() * 100:+6.2f} | {part[~wrong_sharing_1 & (reward == 0)].sum() * 100:+6.2f}")
end_of = lambda arm, opt: exact[arm, opt][0][-1][0]
confirm("SGD: the clip starves y* (phi = w < 1 at R = 16), ReSPO gives it more than 1, yet y* ends lower under ReSPO",
        max(0.0, exact["seq_clip", "sgd"][0][-1][1] - 1, 1 - exact["respo", "sgd"][0][-1][1],
            end_of("respo", "sgd") - end_of("seq_clip", "sgd")), 1e-12)
confirm("SGD: ReSPO's negatives in the clip end y* under a tenth of the clip's; the clip's in ReSPO over ten times ReSPO's",
        max(0.0, end_of("clip +, respo -", "sgd") - end_of("seq_clip", "sgd") / 10,
            10 * end_of("respo", "sgd") - end_of("respo +, clip -", "sgd")), 1e-12)
wrong_part = {arm: exact[arm, "sgd"][1][wrong_sharing_1].sum().item() for arm in ("seq_clip", "respo")}
confirm("SGD, step 4: wrong answers sharing y*'s first token push it down harder under ReSPO; the clip's 1E part is 0",
        max(0.0, wrong_part["respo"] - wrong_part["seq_clip"], abs(exact["seq_clip", "sgd"][1][i_short].item())), 1e-12)
confirm("Adam: every arm ends y* above mu(y*), ReSPO above the clip; swapping the negatives swaps the order",
        max(0.0, *(mu[i_star].item() - end_of(arm, "adam") for arm in ARMS),
            max(end_of("seq_clip", "adam"), end_of("respo +, clip -", "adam"))
            - min(end_of("respo", "adam"), end_of("clip +, respo -", "adam"))), 1e-12)

# %% [markdown]
# Under plain gradient steps the clip starves $y^*$ (the first check) and ReSPO gives it more than 1,
# yet $y^*$ ends lower under ReSPO. The swaps name the cause (the second check): with ReSPO's
# negatives the clip loses $y^*$ too, and with the clip's negatives ReSPO keeps it. The split names
# the responses (the third check, the printed columns): wrong answers starting with `1`, pushed below
# $W=1$ where $\phi_->1$ (the clip gives them 0 below 0.8), push down the token they share with $y^*$. Under ReSPO
# $y^*$'s own term is small beside them (its column): it weighs $\mu(y^*)$ of the expected step.
#
# Under Adam the order reverses (the last check, the right panel): every arm raises $y^*$ above
# $\mu(y^*)$, ReSPO most, and the negatives' coefficients carry the reversal again. Why Adam turns
# the negatives' push into a rise of $y^*$ is not computed here; `deeper/branches_explored` §6 states a
# conjecture. So the lesson holds where it was checked: in this planted space, at one learning rate
# per optimizer. It shows a mechanism, not how often it arises in training.
#
# > **What to remember**
# > - A push on the correct answers lowers some of them at first order, through shared weights: on both warm policies here, on every batch; how many end low-$w$ depends on the step's length.
# > - The sequence clip gives a low-$w$ positive its $w$ and keeps under 0.6 of the positives' push at most steps here; ReSPO's $\phi_+>1$ below $W=1$ keeps more of it at every step.
# > - ReSPO gives an over-generated negative less than $\phi=1$ and less than $\phi=w$: a bound on its weight, not a harder push. Below $W=1$ it pushes harder than on-policy (peak $e/2$ at $W=1/4$) where the clip's trust region gives 0 (§4).
# > - In the planted case that push below 1, on wrong answers sharing a rare correct answer's prefix, lowers it most under plain gradient steps; under Adam the order reverses (§6).
#
# ## Quick questions
#
# 1. Why can a step that pushes every positive up lower one of them?
#    <details><summary>answer</summary>Its first-order change is its own term, $\eta A_j\|\nabla\log\pi_j\|^2>0$, plus the others', $\eta\sum_{i\ne j}A_i\langle\nabla\log\pi_j,\nabla\log\pi_i\rangle$, which is negative when its gradient points against the batch's (§2).</details>
# 2. A negative has $w=4$. What do the sequence clip, $\phi=1$ and ReSPO give it?
#    <details><summary>answer</summary>The clip 4 (no ceiling on its pessimistic side for $A<0$), $\phi=1$ gives 1, ReSPO $\phi_-(4)=2e^{-2}\approx0.27$ (§4).</details>
# 3. Is ReSPO's negative coefficient below the exact weight $w$ for every negative?
#    <details><summary>answer</summary>No: only for $w>1$. For $w<1$ it is above $w$; its peak, $e/2$ at $W=1/4$, is on the under-generated side (§4's second check).</details>
#
# ## Sources
#
# The published kernel (Chen, Ban and Hsieh, arXiv:2609.35433; docs/math.md §3); the sequence
# clip and GSPO's sequence ratio (Zheng et al., arXiv:2507.18071); GRPO's token clip (Shao et al.,
# arXiv:2402.03300); the controls and records behind each section: `research/notebooks/starvation_controls`,
# `research/notebooks/tiny_qwen3_records`, `deeper/branches_explored` §6 (docs/bibliography.md).

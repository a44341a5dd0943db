# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 · Every method is a coefficient
#
# **The question.** GRPO, DAPO, the sequence clip, GSPO, CISPO, SAPO, TOPR, VESPO and ReSPO are
# written as different losses. What actually differs between them?
#
# **The answer.** One number per response (or per token). Every method's gradient is
# $$g=\mathbb E_{y\sim\mu}\big[\phi\,A\,\nabla\log\pi(y|x)\big],$$
# a coefficient $\phi$ on the plain policy gradient, read off either the token ratio
# $r_t=\pi(y_t|\cdot)/\mu(y_t|\cdot)$ or the sequence weight $w=\prod_tr_t$ (docs/math.md §1, §5). The loss is
# `-stopgrad(phi) * A * log pi`, aggregated over tokens; the methods differ only in one row of
# `kernel.METHOD_TABLE`. This notebook reads each row off the kernel. The words *under-generated*
# (low-$w$), *over-generated*, *drifted* and *starved* are core notebook 01's glossary.
#
# ## 1. The clip as a table
#
# The sequence-level PPO clip maximises $\min\big(wA,\ \mathrm{clip}(w,1-\epsilon,1+\epsilon)A\big)$. Where
# the $\min$ picks the clipped constant, the gradient is 0; elsewhere the coefficient is $w$
# (docs/math.md §2; the case-by-case derivation and the surrogate drawn are in
# `deeper/derivation_details` §2):
#
# | sign | $w<1-\epsilon$ (under-generated) | inside the band | $w>1+\epsilon$ (over-generated) |
# |---|---|---|---|
# | $A>0$ | $w$, tends to 0: **starved** | $w$ | 0 |
# | $A<0$ | 0 | $w$ | $w$, unbounded |
#
# Read the two outer corners: a correct answer the policy has drifted away from keeps only its
# vanishing $w$; a wrong answer the policy has drifted towards keeps its unbounded $w$. The
# kernel's `seq_clip` gives exactly this table:

# %%
import math

import matplotlib.pyplot as plt
import torch

from course import SequenceSpace, confirm, reuse_one_group
from nano_respo.kernel import METHOD_TABLE, LossConfig, coefficients, policy_loss, respo_coefficient
from nano_respo.surrogate import phi_curve  # phi read back from the gradient of kernel.policy_loss

torch.set_num_threads(1)
plt.rcParams.update({"figure.dpi": 100, "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})

cells = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
table = {sign: phi_curve("seq_clip", cells.log(), sign) for sign in (True, False)}
confirm("seq_clip's coefficient at w = 0.5, 1, 2 is (w, w, 0) for A > 0 and (0, w, w) for A < 0",
        max((table[True] - torch.tensor([0.5, 1.0, 0.0])).abs().max(), (table[False] - torch.tensor([0.0, 1.0, 2.0])).abs().max()),
        1e-12)

# %% [markdown]
# ## 2. Every method's $\phi$, both signs, one figure
#
# One panel per method of the kernel, $\phi$ against the ratio it reads, read back from the gradient
# of `policy_loss` on one-token responses (so the token ratio and the sequence weight are the
# same number and every method shares one axis). Red: $A>0$; blue: $A<0$; grey band: $[0.8,1.2]$;
# dotted: the exact weight.

# %%
log_w = torch.linspace(math.log(0.01), math.log(20.0), 600, dtype=torch.float64)
w = log_w.exp()
curves = {m: {sign: phi_curve(m, log_w, sign) for sign in (True, False)} for m in METHOD_TABLE}
fig, axes = plt.subplots(4, 4, figsize=(10, 7.4), sharex=True, sharey=True)
for ax, method in zip(axes.flat, METHOD_TABLE):
    ax.axvspan(0.8, 1.2, color="0.88", zorder=0)
    ax.plot(w, w, ":", color="0.5", lw=0.8)
    ax.plot(w, curves[method][True], color="tab:red", lw=1.8)
    ax.plot(w, curves[method][False], color="tab:blue", lw=1.8, ls="--")
    ax.set(xscale="log", ylim=(-0.05, 2.2))
    ax.set_title(f"{method} ({METHOD_TABLE[method][0]})", fontsize=8)
axes.flat[-1].axis("off")
axes.flat[-1].legend(handles=[plt.Line2D([], [], color="tab:red", label="φ for A > 0"),
                              plt.Line2D([], [], color="tab:blue", ls="--", label="φ for A < 0"),
                              plt.Line2D([], [], color="0.5", ls=":", label="exact weight w")], loc="center")
for ax in axes[-1]:
    ax.set_xlabel("w (or r_t)")
fig.tight_layout()
plt.show()

# %% [markdown]
# Three shapes stand out. The hard clips (`grpo`, `dapo`, `dual_clip`, `seq_clip`, `gspo`) follow $w$
# and drop to 0 at their band's edges; GSPO's band is so narrow that on a one-token response
# almost every drift leaves it. The soft ones (`cispo`, `sapo`) follow $w$ near 1 without a hole.
# The reshaped sequence kernels (`vespo`, `topr`, `respo`) choose a curve per sign.
#
# ## 3. ReSPO's two branches
#
# ReSPO (Chen, Ban and Hsieh, arXiv:2609.35433; docs/math.md §3) gives each sign a power mean $\phi_0$ of
# 1 and $w$, then a tilt $\phi=\phi_0e^{\lambda(1-\phi_0)}$; with the paper's constants
# $$\phi_+(w)=\tfrac{1+w}{2}\,e^{1-w},\qquad \phi_-(w)=\sqrt w\,e^{2(1-\sqrt w)} .$$
# Core notebook 03 derives this family; here is what it does.

# %%
dense = torch.linspace(-12.0, 6.0, 180001, dtype=torch.float64)           # log w on a fine grid
pos, neg = respo_coefficient(dense, torch.ones_like(dense, dtype=torch.bool)), respo_coefficient(dense, dense < dense)
fig, ax = plt.subplots(figsize=(7.5, 3.4))
ax.axvspan(0.8, 1.2, color="0.88", zorder=0, label="clip band 1 ± 0.2")
ax.plot(w, w, ":", color="0.4", label="exact weight w")
ax.plot(dense.exp(), pos, color="tab:red", lw=2, label="φ₊ (A > 0)")
ax.plot(dense.exp(), neg, color="tab:blue", lw=2, label="φ₋ (A < 0)")
ax.plot(w, curves["seq_clip"][True], color="tab:red", lw=0.8, alpha=0.6, label="sequence clip, A > 0")
ax.plot(w, curves["seq_clip"][False], color="tab:blue", lw=0.8, alpha=0.6, label="sequence clip, A < 0")
peak_w = dense[neg.argmax()].exp().item()
ax.annotate(f"φ₊ → {pos[0]:.3f} = e/2 as w → 0:\nthe most under-generated correct answer gets the most", xy=(0.012, pos[0]),
            xytext=(0.012, 1.75), fontsize=8, arrowprops=dict(arrowstyle="->"))
ax.annotate(f"φ₋ peaks at w = {peak_w:.2f}, height {neg.max():.3f}", xy=(peak_w, neg.max()), xytext=(0.03, 0.35),
            fontsize=8, arrowprops=dict(arrowstyle="->"))
ax.annotate("both → 0: over-generated\nanswers are faded", xy=(6, 0.2), xytext=(3, 0.9), fontsize=8,
            arrowprops=dict(arrowstyle="->"))
ax.set(xscale="log", xlim=(0.01, 20), ylim=(0, 2.1), xlabel="w", ylabel="φ(w)")
ax.legend(fontsize=7, loc="upper right")
fig.tight_layout()
plt.show()
at_one = torch.zeros(1, dtype=torch.float64, requires_grad=True)
slopes = [torch.autograd.grad(respo_coefficient(at_one, torch.tensor([s])).sum(), at_one)[0].item() for s in (True, False)]
above = dense > 0
band = (dense > math.log(0.05)) & (dense < math.log(0.99))
confirm("both branches are 1 at w = 1 with slope -1/2 (d phi / d w at w = 1, from autograd)",
        max(abs(respo_coefficient(torch.zeros(1, dtype=torch.float64), torch.tensor([s])).item() - 1) for s in (True, False))
        + max(abs(v + 0.5) for v in slopes), 1e-12)
confirm("phi_+ decreases on the whole grid, from e/2 towards 0", max(0.0, pos.diff().max().item(), abs(pos[0] - math.e / 2)), 1e-9)
confirm("phi_- peaks at w = 1/4 with height e/2, is below 1 for every w > 1 and above 1 for 0.05 < w < 0.99",
        max(abs(peak_w - 0.25), abs(neg.max().item() - math.e / 2), max(0.0, neg[above].max().item() - 1),
            max(0.0, 1 - neg[band].min().item())), 1e-4)

# %% [markdown]
# Against the clip (thin lines), ReSPO changes the two corners of §1's table that matter. An
# under-generated correct answer gets *more* than its on-policy push, up to $e/2$, where the clip
# gives it its vanishing $w$. An over-generated wrong answer is faded to 0, where the clip keeps
# its unbounded $w$. Two further differences are less obvious: over-generated correct answers
# fade smoothly instead of being cut at $1+\epsilon$, and a moderately under-generated wrong answer
# is pushed *harder* than on-policy (the band where $\phi_->1$), where the clip gives it 0 below
# $1-\epsilon$. Both branches are bounded by $e/2$, whatever the drift.
#
# Token-level against sequence-level clipping, on one response: [deeper/branches_explored §7](deeper/branches_explored.ipynb).
#
# ## 4. One worked group: every coefficient, and the gradient it makes
#
# A group of 4 responses on the 27-response space of core 01 §4 (reward 1 when the tokens sum to at
# least 4), after 8 Adam steps of ReSPO's loss on that group (`course.reuse_one_group`;
# `deeper/derivation_details` §0 draws the steps). Each method's coefficient on each response (for a
# token-level method, the mean over its 3 tokens), the size of its gradient $g$ on the policy's
# parameters (autograd of its `policy_loss`), and its cosine with the importance-sampled gradient of
# these four samples (the `is` row: an estimate from one group, not the exact gradient):

# %%
space = SequenceSpace(vocab=3, length=3)
reward = (space.seqs.sum(-1) >= 4).double()
theta_mu = space.random_theta(torch.Generator().manual_seed(0))
picks = torch.tensor([14, 13, 12, 10])                         # 112 is correct; 111, 110 and 101 are not
log_w_steps, adv, theta_end = reuse_one_group(space, reward, theta_mu, theta_mu, picks, steps=8)
logp_mu = space.token_log_probs(theta_mu)[picks]
mask = torch.ones(4, 3, dtype=torch.bool)
phis, grads = {}, {}
for method in METHOD_TABLE:
    theta = theta_end.clone().requires_grad_(True)
    logp = space.token_log_probs(theta)[picks]
    loss, _ = policy_loss(logp, logp_mu, adv, mask, LossConfig(method=method))
    (grads[method],) = torch.autograd.grad(-loss, theta)                       # the ascent direction it takes
    phis[method], _ = coefficients(logp.detach(), logp_mu, adv, mask, LossConfig(method=method))
print(f"{'response':<19}" + "".join(f"{''.join(map(str, space.seqs[y].tolist())):>7}" for y in picks.tolist()))
print(f"{'A':<19}" + "".join(f"{a:>7.2f}" for a in adv.tolist()) + "\n" + f"{'w':<19}"
      + "".join(f"{v:>7.2f}" for v in log_w_steps[-1].exp().tolist()))
cosine = {}
for method in METHOD_TABLE:
    size = grads[method].norm()
    cosine[method] = (grads[method] @ grads["is"] / (size * grads["is"].norm())).item() if size > 0 else float("nan")
    print(f"{method:<19}" + "".join(f"{v:>7.2f}" for v in phis[method].mean(-1).tolist())
          + f"   |g| {size:.3f}  cos " + ("n/a, g = 0" if size == 0 else f"{cosine[method]:+.2f}"))
jacobian = torch.autograd.functional.jacobian(lambda t: space.log_probs(t)[picks], theta_end)   # [4, P]
by_hand = (respo_coefficient(log_w_steps[-1], adv > 0) * adv) @ jacobian / mask.sum()
confirm("ReSPO's gradient = sum_i phi_i A_i grad log pi(y_i) / (number of tokens), from the printed phi and A",
        (grads["respo"] - by_hand).abs().max(), 1e-12)
confirm("on this group the sequence clip gives 0 to the correct 112 (above its band) and to 101 (below it), and its step "
        "points away from the importance-sampled one (negative cosine); GSPO's step is 0",
        max(phis["seq_clip"][[0, 3]].abs().max().item(), max(0.0, cosine["seq_clip"]), grads["gspo"].norm().item()), 1e-12)
confirm("ReSPO gives 101 a coefficient above 1, the largest any method gives it",
        max(0.0, 1 - phis["respo"][3, 0].item(), max(phis[m][3].mean().item() for m in METHOD_TABLE) - phis["respo"][3, 0].item()),
        1e-12)

# %% [markdown]
# Read the rows against §1's table. On this group the sequence clip writes 0 for the correct 112
# (over-generated, above the band) and for 101 (under-generated, below it): what is left of its
# step is the push on two wrong answers, and it points away from the importance-sampled one (its cosine).
# GSPO's narrow band is left by every response, so its step is 0. ReSPO keeps every response with a
# bounded weight, and gives the under-generated wrong answer 101 the largest coefficient of any
# method, above 1 (its $\phi_->1$ band of §3). The checks rebuild ReSPO's gradient by hand from the
# printed $\phi$ and $A$. This is one group after one reuse, one draw; the next cell repeats it over
# 30 groups drawn from $\mu$, and `deeper/branches_explored` §3 measures every method's bias and spread
# exactly, at eight drifts and on six draws.

# %%
draws, mu_probs = torch.Generator().manual_seed(1), space.log_probs(theta_mu).exp()
zero_step, away, groups = dict.fromkeys(METHOD_TABLE, 0), dict.fromkeys(METHOD_TABLE, 0), 0
while groups < 30:
    drawn = torch.multinomial(mu_probs, 4, replacement=True, generator=draws)       # a group of 4 sampled from mu
    if reward[drawn].min() == reward[drawn].max():
        continue                                                                  # all equal: no signal, skipped
    groups += 1
    _, adv_d, theta_d = reuse_one_group(space, reward, theta_mu, theta_mu, drawn, steps=8)
    step = {}
    for method in METHOD_TABLE:
        theta = theta_d.clone().requires_grad_(True)
        loss, _ = policy_loss(space.token_log_probs(theta)[drawn], space.token_log_probs(theta_mu)[drawn], adv_d,
                              mask, LossConfig(method=method))
        (step[method],) = torch.autograd.grad(-loss, theta)
    for method in METHOD_TABLE:
        zero_step[method] += int(step[method].norm() == 0)
        away[method] += int(step[method].norm() > 0 and (step[method] @ step["is"]).item() < 0)
print(f"over {groups} groups with a correct and a wrong answer, 8 Adam steps of ReSPO each: groups where the step "
      "is 0 | where it points away from the importance-sampled one")
for method in METHOD_TABLE:
    print(f"  {method:<10} {zero_step[method]:>3} | {away[method]:>3}")
confirm("over these draws ReSPO's step is never 0 and never points away from the importance-sampled one",
        zero_step["respo"] + away["respo"], 0)

# %% [markdown]
# One draw was not the rule: over the 30 groups the printout counts how often each method's step
# vanished or turned against the importance-sampled estimate; ReSPO's did neither (the check).
#
# ReSPO's six numbers on sliders: [deeper/branches_explored §8](deeper/branches_explored.ipynb); every method's
# coefficient at four weights, as a table: [deeper/branches_explored §9](deeper/branches_explored.ipynb).
#
# > **What to remember**
# > - Every method here is a coefficient $\phi$ on $A\,\nabla\log\pi$, read off $r_t$ or $w$; the loss differs only in that coefficient.
# > - The sequence clip starves under-generated correct answers ($\phi=w\to0$) and keeps over-generated wrong ones at their unbounded $w$; token clips see ratios near 1, starve less, and put no bound on $w$ (`deeper/branches_explored` §5, §7).
# > - ReSPO's branches are smooth and bounded by $e/2$: the most under-generated correct answer gets the most, over-generated answers of both signs fade.
#
# ## Quick questions
#
# 1. A correct answer has $w=0.05$. What do the sequence clip, GRPO on a one-token response and ReSPO give it?
#    <details><summary>answer</summary>§2's panels at $w=0.05$: the sequence clip and GRPO give $w=0.05$ (GRPO clips positives only above $1+\epsilon$); ReSPO gives $\phi_+(0.05)$, near $e/2$ (§3's figure).</details>
# 2. Where does ReSPO push a wrong answer harder than on-policy, and where does it let it go?
#    <details><summary>answer</summary>Harder on a band of moderately under-generated wrong answers ($\phi_->1$ for $0.05<w<0.99$, peak $e/2$ at $w=1/4$); it lets go at both ends, $w\to0$ and $w\gg1$ (§3's checks; §4's 101).</details>
# 3. In §4's worked group, why does the sequence clip's step point away from the importance-sampled one?
#    <details><summary>answer</summary>It gives 0 to the correct 112 (above its band) and to 101 (below it), so what is left of its step is the push down on the two wrong answers 111 and 110 (§4's second check). Over the 30 groups that happens on some draws, never with ReSPO's step (the count and its check).</details>
#
# ## Sources
#
# From [docs/bibliography.md](../docs/bibliography.md): PPO (arXiv:1707.06347) and GRPO
# (arXiv:2402.03300) for the token clip; DAPO's clip-higher (arXiv:2503.14476); GSPO's
# length-normalised sequence clip (arXiv:2507.18071); CISPO (arXiv:2506.13585); SAPO's soft gate
# (arXiv:2511.20347); TOPR (arXiv:2503.14286); VESPO (arXiv:2602.10693); ReSPO (Chen, Ban and Hsieh,
# arXiv:2609.35433). The dual clip and this project's ablations are rows of docs/math.md §5.

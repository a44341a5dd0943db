# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Deeper · Starvation's controls: the reconstruction's arms, sweeps and records
#
# The controls behind core notebook 04 ([04_starvation_watched](../../notebooks/04_starvation_watched.ipynb)). Every ReSPO arm here,
# live or read from the records, is this project's reconstruction, `respo_wtilt`
# (w^alpha e^{-lambda (w - 1)} per branch), and every method runs under the aggregation its
# records were made with, `seq-mean-token-sum-norm` (`AGG` below): that keeps the records and
# the live runs comparable. The published kernel, `respo`, is what core notebook 04 measures.
# "On every batch" here means the five batches of one warm policy (warm-up seed 1): core notebook
# 04_starvation_watched (§1-§2) prints the mechanism on two warm policies side by side, and some
# readings of §2 and §5 here (how many positives the first step starves, whether a starved
# positive's own push brings it back, the over-generated negatives' coefficient against
# $\phi=1$) do not carry over to the second.
#
# Core notebooks 02_every_method_is_a_coefficient and 03_where_the_kernel_comes_from looked at
# coefficients as functions. Here a policy learns: after (0) the environment and (1) the reuse
# loop written out, we watch (2) how a correct response ends up with a low weight $w$ although
# every update pushed positives up, (3) what each method then gives it, (4) what that costs in
# learning, and (5) the other half of the problem: over-generated wrong responses taking the update.
# Then what surrounds it in practice: (6) staleness (`--lag`), (7) stuck runs and the
# optimizer, (8) the temperature pitfall, (9) when the positive branch hurts, (10) which
# negative branch collapsed under heavy reuse; (11) two exercises and (12) quick questions.
# The environment is the digit-sum bandit of `toy/`; every update is `kernel.policy_loss`.

# %%
import copy
import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import torch

import toy
import checks
from course import confirm
from nano_respo.kernel import (METHOD_TABLE, aggregate, coefficients, group_advantages, policy_loss,
                               power_tilt, sequence_log_weight)
from research.lab.report import is_stuck, load_records, mean_ci
from toy.envs import DigitSum
from research.toy.stuck import coasting_share
from research.study_rows import StudyLossConfig
from toy.train import Job, train as toy_train


def train(job, **kwargs):
    """toy.train.train with the reconstruction's knobs (respo_wtilt, research/study_rows.py) configurable."""
    return toy_train(job, config_class=StudyLossConfig, **kwargs)


AGG = "seq-mean-token-sum-norm"  # the aggregation the toy's records were made with

torch.set_num_threads(1)
plt.rcParams.update({"figure.dpi": 100, "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})
ROOT = Path(toy.__file__).resolve().parent.parent

# %% [markdown]
# ## 0. The environment
#
# The prompt is a target $t$; the policy (a small MLP reading the previous token and the
# remaining sum) writes digits 0–3 and an end token; the verifier gives reward 1 exactly when
# the digits sum to $t$ and the response ended. Large targets need long responses, which the
# initial policy rarely writes: they are the under-generated positives.

# %%
env = DigitSum()
print(f"digits 0..{env.digits - 1}, end token {env.end}, at most {env.max_len} tokens")
print("training targets:", env.train_prompts.tolist())
torch.manual_seed(0)
policy = env.make_policy()
gen = torch.Generator().manual_seed(0)
shown = env.sample(policy, torch.tensor([12, 12, 30, 30]), gen)
for prompt, tokens, mask, r in zip(shown.prompts, shown.tokens, shown.mask, env.reward(shown)):
    print(f"target {prompt.item():>2}: {tokens[mask].tolist()}  reward {r.item():.0f}")

# %% [markdown]
# ## 1. The reuse loop, written out
#
# This is `toy/train.py`'s loop without its bookkeeping: sample a rollout batch from the
# current policy $\mu$ (storing $\log\mu$ of every token), compute group advantages, then take
# `reuse` optimizer steps on that one batch, as mini-batches of whole groups over epochs. After
# the first step the policy $\pi_\theta$ is no longer $\mu$, and the weights drift.

# %%
def reuse_loop(env, policy, method, lr, reuse, iterations, seed, prompts_per_batch=16, group_size=8, minibatches=4,
               after_batch=None):
    """Train `policy` in place; returns the mean training reward of each rollout batch.

    after_batch: called with the policy after each batch's R steps (§6 keeps copies to lag the sampler).
    """
    cfg = StudyLossConfig(agg=AGG, method=method)
    optimizer = torch.optim.Adam(policy.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    per_epoch = min(reuse, minibatches)                      # mini-batches per epoch
    rewards = []
    for _ in range(iterations):
        pick = torch.randint(len(env.train_prompts), (prompts_per_batch,), generator=generator)
        prompts = env.train_prompts[pick].repeat_interleave(group_size)       # [B] groups contiguous
        batch = env.sample(policy, prompts, generator)                        # mu = the policy now
        reward = env.reward(batch)                                            # [B] the verifier
        adv, _ = group_advantages(reward, group_size)                         # [B] r - group mean
        rewards.append(reward.mean().item())
        for _ in range(reuse // per_epoch):                                   # epochs
            order = torch.randperm(prompts_per_batch, generator=generator).view(per_epoch, -1)
            for groups in order:                                              # one optimizer step each
                rows = (groups[:, None] * group_size + torch.arange(group_size)).reshape(-1)
                part = batch[rows]
                logp = env.log_probs(policy, part)                            # [b, T] log pi_theta, drifting
                loss, _ = policy_loss(logp, part.old_logp, adv[rows], part.mask, cfg)
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
                optimizer.step()
        if after_batch is not None:
            after_batch(policy)
    return rewards


torch.manual_seed(1)
policy = env.make_policy()
warm = reuse_loop(env, policy, "respo_wtilt", lr=0.01, reuse=4, iterations=15, seed=1)
print("reward of the 15 warm-up batches:", " ".join(f"{r:.2f}" for r in warm))

# %% [markdown]
# *Takeaway:* reuse is a few lines: one `env.sample` (which stores $\log\mu$), then several
# `policy_loss` steps on the same episodes. Everything below uses this warm policy.
#
# ## 2. Mechanism: how a correct response ends up with a low $w$
#
# Draw one batch from the warm policy (32 prompts × 8 responses) and take 16 full-batch
# sequence-clip steps on it ($R=16$, learning rate 0.01), recording every response's $\log w$
# before each step. First a fact about the advantages: $A_i=r_i-\bar r_g$ is centred in its
# group, so $\sum_{i\in g}A_i=0$ in every group $g$: the negatives' total $|A|$ equals the
# positives' total, however many more negatives there are.

# %%
gen = torch.Generator().manual_seed(6)
prompts = env.train_prompts[torch.randint(len(env.train_prompts), (32,), generator=gen)].repeat_interleave(8)
batch = env.sample(policy, prompts, gen)
adv, _ = group_advantages(env.reward(batch), 8)
positive, negative = adv > 0, adv < 0
lengths = batch.mask.sum(-1)
print(f"batch reward {env.reward(batch).mean():.2f}: {int(positive.sum())} positives, {int(negative.sum())} negatives")
print(f"largest |sum of A| over one group: {adv.view(-1, 8).sum(1).abs().max():.1e}; "
      f"sum of A over positives {adv[positive].sum():+.2f}, over negatives {adv[negative].sum():+.2f}")


def drift_run(method, steps=16, lr=0.01, optimizer="adam", advantages=None, episodes=None, loss=None, base=None,
              coefficient=None):
    """Copy the warm policy, take `steps` full-batch updates on `episodes` (default: the batch above).

    optimizer: "adam" or "sgd"; advantages: default the batch's; loss: LossConfig overrides (§9);
    base: the policy to copy (default: the warm policy); coefficient: a control arm's edit of the method's
    coefficient, called as coefficient(step, phi [B, T], log_w [B]) -> phi before each step (§2's controls).
    Returns the token log-probs seen
    before each step [steps, B, T] and the L2 length of each step [steps].
    """
    episodes = batch if episodes is None else episodes
    advantages = adv if advantages is None else advantages
    pol = copy.deepcopy(policy if base is None else base)
    make = torch.optim.Adam if optimizer == "adam" else torch.optim.SGD
    opt = make(pol.parameters(), lr=lr)
    cfg = StudyLossConfig(agg=AGG, method=method, **(loss or {}))
    seen, moved = [], []
    for _ in range(steps):
        logp = env.log_probs(pol, episodes)                                   # [B, T]
        seen.append(logp.detach())
        if coefficient is None:
            loss, _ = policy_loss(logp, episodes.old_logp, advantages, episodes.mask, cfg)
        else:                                                                 # the kernel's loss, phi edited
            phi, log_w_now = coefficients(logp.detach(), episodes.old_logp, advantages, episodes.mask, cfg)
            phi = coefficient(len(seen) - 1, phi, log_w_now)
            loss = aggregate(-(phi * advantages[:, None]).detach() * logp, episodes.mask, cfg.agg, cfg.norm_len)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(pol.parameters(), 1.0)
        before = torch.nn.utils.parameters_to_vector(pol.parameters()).detach().clone()
        opt.step()
        moved.append((torch.nn.utils.parameters_to_vector(pol.parameters()) - before).norm().item())
    return torch.stack(seen), torch.tensor(moved)                             # [steps, B, T], [steps]


def log_weights(run, episodes=None):
    """[steps, B] sequence log w of every response before each step of a drift_run."""
    episodes = batch if episodes is None else episodes
    return torch.stack([sequence_log_weight(lp, episodes.old_logp, episodes.mask) for lp in run])


def starved(lw, rows):
    """How many of `rows` sit below w = 0.8."""
    return int((rows & (lw < math.log(0.8))).sum())


clip_run, clip_moved = drift_run("seq_clip")
log_w = log_weights(clip_run)                                                 # [steps, B]
print("sequence clip: positives with w < 0.8 before each step: "
      + " ".join(f"{starved(lw, positive)}" for lw in log_w) + f"  (of {int(positive.sum())})")

# %% [markdown]
# The first step is on-policy ($w=1$, every positive pushed up with coefficient 1), yet after it
# a good share of the positives sit below $w=0.8$; then, over the next steps, the count falls
# back (the printout). How can a step that pushes every positive up lower some of them?
#
# **At first order, through shared weights.** A step $\Delta\theta$ changes positive $j$'s
# log-probability by $\langle\nabla\log\pi_j,\Delta\theta\rangle$ to first order. For a gradient step on
# the positives alone, $\Delta\theta=\eta\sum_iA_i\nabla\log\pi_i$, that is
# $\eta\sum_iA_i\langle\nabla\log\pi_j,\nabla\log\pi_i\rangle$: negative for any positive whose gradient
# points against the batch's, although its own term is positive. Adam's first step has another
# direction, $\mathrm{lr}\cdot\hat m/\sqrt{\hat v}=\pm\mathrm{lr}$ on *every* weight (the sign of the
# gradient), and another length, set by lr and the number of weights whatever the gradient's
# size. The next cell counts, per positive, the sign of the first-order change along both
# directions (per-response gradients by autograd, the negatives' advantages set to 0), and
# checks the count against two tiny real steps.

# %%
params = list(policy.parameters())


def response_gradients(episodes):
    """[B, P] grad log pi(y) of every response under the warm policy (autograd, one response at a time)."""
    seq_logp = (env.log_probs(policy, episodes) * episodes.mask).sum(-1)               # [B]
    return torch.stack([torch.cat([g.reshape(-1) for g in torch.autograd.grad(seq_logp[i], params, retain_graph=True)])
                        for i in range(len(seq_logp))])


grads_6 = response_gradients(batch)                                                   # [B, P]
push = (adv * positive) @ grads_6                                                     # [P] positives only
exact_fall = positive & (grads_6 @ push < 0)                                          # first order, gradient direction
sign_fall = positive & (grads_6 @ push.sign() < 0)                                    # first order, Adam's first direction
print(f"positives whose log pi falls at first order, the negatives' advantages set to 0: {int(exact_fall.sum())} of "
      f"{int(positive.sum())} along the gradient, {int(sign_fall.sum())} along its sign (Adam's first step), "
      f"{int((exact_fall & sign_fall).sum())} in both")
start = torch.nn.utils.parameters_to_vector(params).detach()
for eta in (1e-4, 1e-3):                                                              # two tiny steps along the gradient
    tiny = copy.deepcopy(policy)
    torch.nn.utils.vector_to_parameters(start + eta * push / push.norm(), tiny.parameters())
    moved_lw = sequence_log_weight(env.log_probs(tiny, batch).detach(), batch.old_logp, batch.mask)
    print(f"  a real step of length {eta:g} along it: {int((positive & (moved_lw < 0)).sum())} positives fall, "
          f"the lowest log w {moved_lw[positive].min():+.5f}")
    confirm(f"the positives a step of length {eta:g} lowers are exactly those the first-order count names",
            ((positive & (moved_lw < 0)) != exact_fall).sum().item(), 1e-12)

# %% [markdown]
# So the interference is there before any question of step length: a fraction of the
# positives lose probability along the very direction that raises the positives' total
# (printed above), and a tiny real step lowers exactly those. Now the length. The controls take
# the same 16 steps with the negatives' advantages set to 0 (positives only), and with plain
# SGD, once at learning rate 1 (the clipped gradient itself, a short step) and once at the
# learning rate that makes SGD's first step as long as Adam's.

# %%
def sgd_rate_matching_adam(advantages, episodes=None):
    """SGD learning rate whose first step on `episodes` (default `batch`) is as long (L2) as Adam's at lr 0.01."""
    _, adam_moved = drift_run("seq_clip", steps=1, advantages=advantages, episodes=episodes)
    _, unit_moved = drift_run("seq_clip", steps=1, optimizer="sgd", lr=1.0, advantages=advantages, episodes=episodes)
    return (adam_moved[0] / unit_moved[0]).item()


shown_steps = (1, 2, 4, 8, 15)
first_step = clip_moved[0].item() / 0.01
n_weights = sum(p.numel() for p in policy.parameters())
print(f"Adam's first step: length {clip_moved[0]:.3f} = lr x {first_step:.1f}; sqrt(number of weights) = {math.sqrt(n_weights):.1f}")
print(f"positives with w < 0.8 after {', '.join(map(str, shown_steps))} steps (of {int(positive.sum())}); the first step's length:")
only_positive = adv * positive
for name, optimizer, advantages in (("Adam, whole batch", "adam", adv), ("Adam, positives only", "adam", only_positive),
                                    ("SGD lr 1, whole batch", "sgd", adv), ("SGD lr 1, positives only", "sgd", only_positive),
                                    ("SGD, Adam's step length, whole batch", "sgd*", adv),
                                    ("SGD, Adam's step length, positives only", "sgd*", only_positive)):
    lr = 0.01 if optimizer == "adam" else 1.0 if optimizer == "sgd" else sgd_rate_matching_adam(advantages)
    run, moved = drift_run("seq_clip", lr=lr, optimizer=optimizer.rstrip("*"), advantages=advantages)
    lw = log_weights(run)
    print(f"  {name:<40} {' '.join(f'{starved(lw[s], positive):>2}' for s in shown_steps)}   length {moved[0]:.3f}"
          f"   mean log w of the positives after one step {lw[1, positive].mean():+.2f}")

# %% [markdown]
# The same first step on four more batches (other sampling seeds from the same warm policy),
# to see whether the reading holds beyond one batch:

# %%
control_seeds = (7, 8, 9, 10)


def draw_batch(seed):
    """A fresh batch of 32 groups of 8 from the warm policy and its group advantages."""
    g = torch.Generator().manual_seed(seed)
    picked = env.train_prompts[torch.randint(len(env.train_prompts), (32,), generator=g)].repeat_interleave(8)
    episodes = env.sample(policy, picked, g)
    return episodes, group_advantages(env.reward(episodes), 8)[0]


other_batches = {seed: draw_batch(seed) for seed in control_seeds}
band_batches = {6: (batch, adv), **other_batches}                             # §2's batch and the four others
band_seeds = tuple(band_batches)
print("positives with w < 0.8 after one step, batches " + ", ".join(map(str, control_seeds)) + ":")
for name, optimizer, only in (("Adam, whole batch", "adam", False), ("Adam, positives only", "adam", True),
                              ("SGD lr 1, whole batch", "sgd", False), ("SGD lr 1, positives only", "sgd", True),
                              ("SGD, Adam's step length, whole batch", "sgd*", False),
                              ("SGD, Adam's step length, positives only", "sgd*", True)):
    counts = []
    for episodes, a in other_batches.values():
        pos = a > 0
        a = a * pos if only else a
        lr = 0.01 if optimizer == "adam" else 1.0 if optimizer == "sgd" else sgd_rate_matching_adam(a, episodes)
        run, _ = drift_run("seq_clip", steps=2, lr=lr, optimizer=optimizer.rstrip("*"), advantages=a, episodes=episodes)
        counts.append(f"{starved(log_weights(run, episodes)[1], pos):>2}/{int(pos.sum())}")
    print(f"  {name:<40} " + "  ".join(counts))

# %%
step = 4
token_ratio = (clip_run[step] - batch.old_logp)[batch.mask & positive[:, None]]   # d_t of every positive token
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3))
bins = torch.linspace(-2.5, 1.5, 41)
ax1.hist(token_ratio, bins=bins, density=True, alpha=0.6, color="tab:gray", label="token log-ratio d_t")
ax1.hist(log_w[step, positive], bins=bins, density=True, alpha=0.6, color="tab:red", label="sequence log w = Σ d_t")
ax1.axvline(math.log(0.8), color="k", ls=":", lw=1)
ax1.set(xlabel="log-ratio after 4 updates", ylabel="density",
        title="positives: each token moves a little, the sum a lot")
ax1.legend(fontsize=7)
for rows, colour, name in ((positive, "tab:red", "positives"), (negative, "tab:blue", "negatives")):
    jitter = 0.15 * torch.randn(int(rows.sum()), generator=torch.Generator().manual_seed(0))
    ax2.scatter(lengths[rows] + jitter, log_w[step, rows], s=10, color=colour, alpha=0.6, label=name)
ax2.axhline(math.log(0.8), color="k", ls=":", lw=1)
ax2.set(xlabel="response length (tokens)", ylabel="log w after 4 updates", title="log w against response length")
ax2.legend(fontsize=7)
fig.tight_layout()
plt.show()
print(f"after 4 updates: token log-ratios of positives have std {token_ratio.std():.2f}, "
      f"their sequence log w std {log_w[step, positive].std():.2f}")
cuts = torch.quantile(lengths[positive].float(), torch.tensor([1 / 3, 2 / 3]))
tercile = torch.bucketize(lengths.float(), cuts, right=True)                              # [B] 0, 1, 2
print("std of the positives' log w after 4 updates, by length tercile (shortest first): "
      + ", ".join(f"{log_w[step, positive & (tercile == k)].std():.2f} ({int((positive & (tercile == k)).sum())} positives, "
                  f"{int(lengths[positive & (tercile == k)].min())}-{int(lengths[positive & (tercile == k)].max())} tokens)"
                  for k in range(3)))
print("under the clip, after 1, 2, 4, 8 steps: positives above w = 1.2 | share of the positives' total phi A "
      "that goes to those below 0.8")
low_share = {}
for s in (1, 2, 4, 8):
    phi_clip = coefficients(clip_run[s], batch.old_logp, adv, batch.mask, StudyLossConfig(agg=AGG, method="seq_clip"))[0][:, 0]
    push = phi_clip * adv * positive                                          # [B] a sequence method: one phi per row
    low_share[s] = (push[positive & (log_w[s] < math.log(0.8))].sum() / push.sum()).item()
    print(f"  after {s} step{'s' if s > 1 else ''}: {int((positive & (log_w[s] > math.log(1.2))).sum()):>2} | "
          f"{low_share[s]:.0%}")
confirm("under the clip, most of the positives' push goes to those below 0.8 after the first step only, a minority after "
        "2, 4 and 8", max(0.0, 0.5 - low_share[1], *(low_share[s] - 0.5 for s in (2, 4, 8))), 1e-12)

# %% [markdown]
# Read the controls row by row (the printouts above). Adam with the positives alone starves
# about as many positives after one step as Adam with the whole batch: the negatives' push is
# not needed for it. SGD at learning rate 1 follows the gradient's direction with a step many
# times shorter (the printed lengths) and starves none or almost none after one step. SGD given
# Adam's step length starves as many or more, and lowers the positives' mean $\log w$ although
# every coefficient on them was positive (Adam's direction, $\pm$lr on every weight, raises it at
# that length). So after *one* step the length decides whether positives reach 0.8.
#
# Does the first-order count then say *which* ones? Adam's first step has the same direction at
# every learning rate ($\mathrm{lr}\cdot g/(|g|+\epsilon)$ per weight), so the positives it lowers at
# first order, $\langle\nabla\log\pi_j,\Delta\theta\rangle<0$ for the real step $\Delta\theta$, are one set per
# batch. The next cell takes that first step (positives only) at five learning rates on all five
# batches and counts the positives that fall and those that end below 0.8, and how many of each
# are outside that set. The zero-sum identity says the same as the positives-only rows from the
# other side: the negatives' total weight is the positives', so "there are more negatives" cannot
# by itself be why positives fall.

# %%
sweep_lrs = (1e-4, 1e-3, 3e-3, 1e-2, 3e-2)


def adam_first_direction(episodes, a):
    """The displacement of Adam's first step at lr 1 on `episodes` with advantages `a` (its direction at every lr)."""
    pol = copy.deepcopy(policy)
    opt = torch.optim.Adam(pol.parameters(), lr=1.0)
    loss, _ = policy_loss(env.log_probs(pol, episodes), episodes.old_logp, a, episodes.mask, StudyLossConfig(agg=AGG, method="seq_clip"))
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(pol.parameters(), 1.0)
    before = torch.nn.utils.parameters_to_vector(pol.parameters()).detach().clone()
    opt.step()
    return torch.nn.utils.parameters_to_vector(pol.parameters()).detach() - before


print("Adam's first step, positives only: per batch, the positives its direction lowers at first order, then at each lr "
      "the positives that fall | end below 0.8, each with (how many of them are outside that set)")
print("  lr:" + " " * 16 + "".join(f"{lr:<17g}" for lr in sweep_lrs))
first_order = {}
for seed, (episodes, a) in band_batches.items():
    pos = a > 0
    grads_b = grads_6 if seed == 6 else response_gradients(episodes)
    lowered = pos & (grads_b @ adam_first_direction(episodes, a * pos) < 0)           # the first-order set
    cells = []
    for lr in sweep_lrs:
        run, _ = drift_run("seq_clip", steps=2, lr=lr, advantages=a * pos, episodes=episodes)
        lw1 = log_weights(run, episodes)[1]
        fell, below = pos & (lw1 < 0), pos & (lw1 < math.log(0.8))
        first_order[seed, lr] = (int((fell != lowered).sum()), int((below & ~lowered).sum()))
        cells.append(f"{int(fell.sum()):>2} ({int((fell & ~lowered).sum()):>2}) | {int(below.sum()):>2} ({int((below & ~lowered).sum()):>2})")
    print(f"  batch {seed:>2}: {int(lowered.sum()):>2} of {int(pos.sum())}   " + "   ".join(cells))
confirm("at lr 1e-4 the positives Adam's first step lowers are exactly those its direction lowers at first order, "
        "on every batch", sum(first_order[seed, 1e-4][0] for seed in band_seeds), 1e-12)
confirm("up to lr 0.003 every positive that ends below 0.8 is one its direction lowers at first order, on every batch",
        sum(first_order[seed, lr][1] for seed in band_seeds for lr in (1e-4, 1e-3, 3e-3)), 1e-12)
confirm("at lr 0.01 on some batch, and at lr 0.03 on every batch, positives its direction raises at first order end "
        "below 0.8 too", max(0, max(first_order[seed, 1e-2][1] for seed in band_seeds) == 0,
                             *(first_order[seed, 3e-2][1] == 0 for seed in band_seeds)), 1e-12)

# %% [markdown]
# Read the table by learning rate. With a short step (lr $10^{-4}$) the positives that fall are
# exactly the ones first order names, on every batch (the first check): interference through
# shared weights, nothing else. Up to lr 0.003 every positive that ends below 0.8 is one of those
# (the second check), though some positives first order raises already fall a little. At lr 0.01,
# §2's rate, that still holds on some batches (§2's among them) and not on others, and at 0.03 on
# none (the third check; the counts in brackets): there the step is beyond the linear regime,
# and the first-order count no longer says which positives fall. Interference at first order
# names the falling positives for a short step; at the rates these runs use, the length of Adam's
# step decides how many cross 0.8 and, beyond the linear regime, which.
#
# **The product over length**: $\log w=\sum_td_t$, so small token changes add up along a
# response (left: the token log-ratios are narrow, the sums wide). Whether the spread of $\log w$
# grows with length on this batch is the tercile line printed under the figure; the scatter
# (right) shows every response.
#
# **And then they come back, under the clip.** Over the 16 steps the count of starved
# positives falls again (the first printout). The sequence clip gives a positive below
# $1-\epsilon$ its $w$, not 0, and gives 0 to every positive above $1+\epsilon$, so after the first
# step most of the positive update goes to the ones left below the band; from the second step on
# a minority does (the last printout and its check). Is that concentration why they come back?
# The cell below is the control: the count of starved
# positives before each step under the clip, under `no_is` ($\phi=1$ on every response, no
# concentration and no trust region) and under ReSPO, each with the whole batch and with the
# positives alone.

# %%
print("positives with w < 0.8 before each of the 16 steps (of " + f"{int(positive.sum())}):")
come_back = {}
for method in ("seq_clip", "no_is", "respo_wtilt"):
    for only, a in (("whole batch", adv), ("positives only", adv * positive)):
        lw = log_weights(drift_run(method, advantages=a)[0])
        come_back[method, only] = [starved(l, positive) for l in lw]
        print(f"  {method:<9} {only:<15} " + " ".join(f"{c:>2}" for c in come_back[method, only]))
confirm("with the positives alone every arm brings most of them back, no_is (phi = 1, no concentration) too",
        sum(counts[-1] > counts[1] / 2 for (m, only), counts in come_back.items() if only == "positives only"), 1e-12)
confirm("no_is on the whole batch, every negative pushed at phi = 1 (those below 0.8 too), ends with more of them low "
        "than it started",
        max(0, come_back["no_is", "whole batch"][1] - come_back["no_is", "whole batch"][-1]), 1e-12)

# %% [markdown]
# The concentration is not needed: with the positives alone, `no_is` brings them back about as
# the clip does (the rows and the first check). With the whole batch and `no_is` they stay down
# and more follow (the second check). Two questions remain, and the next cell answers each with
# control arms on all five batches. *What brings them back?* Fix the set $S$ of positives below
# 0.8 after the first (on-policy) step; from the second step on, with the negatives left out,
# push only $S$ (each starved positive's own term), or push every positive but $S$ (the others'
# terms, through shared weights), once with `no_is`'s coefficient 1 and once with the clip's
# (which gives $S$ its $w$). *What keeps them down?* `no_is` on the whole batch, once as it is
# and once with the negatives whose $w$ fell below 0.8 given 0 (a trust region on the negatives
# only). That arm removes most of the negatives' push, so it needs controls of its own: as many
# negatives given 0, picked at random at each step or picked as the highest-$w$ ones (which
# leaves the fallen ones pushed), and every negative's coefficient scaled by 0.3 from the first
# step on. Last, plain SGD at learning rate 1, which after one step starved none.

# %%
def keep_rows(rows):
    """A coefficient edit: from the second step on, phi = 0 outside `rows` (the first step is the kernel's own)."""
    return lambda step, phi, log_w: phi if step == 0 else phi * rows[:, None].to(phi.dtype)


def drop_fallen_negatives(a):
    """A coefficient edit: phi = 0 on the negatives whose w is below 0.8 now."""
    return lambda step, phi, log_w: phi * ~((a < 0) & (log_w < math.log(0.8)))[:, None]


def drop_as_many_negatives(a, pick, seed=0):
    """A coefficient edit: phi = 0 on as many negatives as have w below 0.8 now, chosen by `pick`:
    "random" (a fresh random set at each step) or "highest" (the highest-w negatives)."""
    generator = torch.Generator().manual_seed(seed)
    negatives = (a < 0).nonzero().squeeze(1)

    def edit(step, phi, log_w):
        k = int(((a < 0) & (log_w < math.log(0.8))).sum())
        order = torch.randperm(len(negatives), generator=generator) if pick == "random" else \
            log_w[negatives].argsort(descending=True)
        keep = torch.ones(len(a), dtype=phi.dtype)
        keep[negatives[order[:k]]] = 0
        return phi * keep[:, None]
    return edit


def scale_negatives(a, factor):
    """A coefficient edit: every negative's phi times `factor`."""
    return lambda step, phi, log_w: phi * torch.where(a < 0, factor, 1.0).to(phi.dtype)[:, None]


unchanged = log_weights(drift_run("no_is", advantages=adv * positive, coefficient=lambda step, phi, log_w: phi)[0])
confirm("the coefficient hook with nothing edited reproduces the kernel's own run (no_is, positives only)",
        abs(torch.tensor([starved(l, positive) for l in unchanged]) - torch.tensor(come_back["no_is", "positives only"]))
        .sum().item(), 1e-12)
own_push, keep_down = {}, {}
for seed, (episodes, a) in band_batches.items():
    pos = a > 0
    first, _ = drift_run("no_is", steps=2, advantages=a * pos, episodes=episodes)
    S = pos & (log_weights(first, episodes)[1] < math.log(0.8))
    for method in ("no_is", "seq_clip"):
        for arm, rows in (("every positive", pos), ("only S", S), ("every positive but S", pos & ~S)):
            lw = log_weights(drift_run(method, advantages=a * pos, episodes=episodes, coefficient=keep_rows(rows))[0],
                             episodes)
            own_push[seed, method, arm] = (starved(lw[-1], S), int(S.sum()))
    for arm, kwargs in (("no_is", {}), ("no_is, fallen negatives 0", {"coefficient": drop_fallen_negatives(a)}),
                        ("no_is, as many random 0", {"coefficient": drop_as_many_negatives(a, "random", seed)}),
                        ("no_is, as many highest-w 0", {"coefficient": drop_as_many_negatives(a, "highest")}),
                        ("no_is, every negative x 0.3", {"coefficient": scale_negatives(a, 0.3)}),
                        ("no_is, SGD lr 1", {"optimizer": "sgd", "lr": 1.0})):
        lw = log_weights(drift_run("no_is", advantages=a, episodes=episodes, **kwargs)[0], episodes)
        keep_down[seed, arm] = (starved(lw[1], pos), starved(lw[-1], pos), int(pos.sum()))
print("positives only, after the first step: how many of S are still below 0.8 after 16 steps (of |S|), per batch")
for method in ("no_is", "seq_clip"):
    for arm in ("every positive", "only S", "every positive but S"):
        print(f"  {method:<9} pushing {arm:<21} " + "  ".join(f"{own_push[seed, method, arm][0]:>2}/{own_push[seed, method, arm][1]:<2}"
                                                       for seed in band_seeds))
print("whole batch: positives below 0.8 after one step -> after 16 steps (of all positives), per batch")
negative_arms = ("no_is, fallen negatives 0", "no_is, as many random 0", "no_is, as many highest-w 0",
                 "no_is, every negative x 0.3")
for arm in ("no_is",) + negative_arms + ("no_is, SGD lr 1",):
    print(f"  {arm:<29} " + "  ".join(f"{keep_down[seed, arm][0]:>2} -> {keep_down[seed, arm][1]:>2}/{keep_down[seed, arm][2]:<2}"
                                       for seed in band_seeds))
confirm("pushed alone (own terms only), S comes back: at most a quarter of it below 0.8 at the end, on every batch, "
        "with coefficient 1 and with the clip's w",
        max(0.0, *(own_push[seed, m, "only S"][0] - own_push[seed, m, "only S"][1] / 4
                   for seed in band_seeds for m in ("no_is", "seq_clip"))), 1e-12)
confirm("given 0 while the other positives are pushed, more of S stays below 0.8 than when S alone is pushed, on every batch",
        sum(own_push[seed, m, "every positive but S"][0] <= own_push[seed, m, "only S"][0]
            for seed in band_seeds for m in ("no_is", "seq_clip")), 1e-12)
confirm("no_is on the whole batch ends with under half as many positives below 0.8 in every arm that cuts the "
        "negatives' push (the fallen ones 0, as many random or highest-w ones 0, all x 0.3), on every batch",
        sum(keep_down[seed, arm][1] >= keep_down[seed, "no_is"][1] / 2 for seed in band_seeds for arm in negative_arms),
        1e-12)
confirm("as many random negatives given 0 end nearer the fallen ones given 0 than plain no_is, on every batch",
        sum(abs(keep_down[seed, "no_is, as many random 0"][1] - keep_down[seed, "no_is, fallen negatives 0"][1])
            >= abs(keep_down[seed, "no_is, as many random 0"][1] - keep_down[seed, "no_is"][1]) for seed in band_seeds), 1e-12)
more_when_highest = sum(keep_down[seed, "no_is, as many highest-w 0"][1] > keep_down[seed, "no_is, fallen negatives 0"][1]
                        for seed in band_seeds)
print(f"the highest-w negatives given 0 leave more positives below 0.8 than the fallen ones given 0 on "
      f"{more_when_highest} of {len(band_seeds)} batches")
confirm("on most batches the highest-w ones given 0 leave more positives down than the fallen ones given 0",
        max(0, len(band_seeds) // 2 + 1 - more_when_highest), 1e-12)
confirm("plain SGD at lr 1 with no_is on the whole batch starves at most one positive after one step, and more than "
        "that after 16 steps, on every batch",
        sum(keep_down[seed, "no_is, SGD lr 1"][0] > 1 or keep_down[seed, "no_is, SGD lr 1"][1] <= keep_down[seed, "no_is, SGD lr 1"][0]
            for seed in band_seeds), 1e-12)

# %% [markdown]
# Pushed alone, $S$ comes back, with coefficient 1 and with the clip's $w$ alike (the first
# check; Adam's step does not grow with the coefficients' size, §2). Given 0 while the other
# positives are pushed, more of $S$ stays down, on every batch (the second check). So what
# brings a starved positive back is its *own* term; the other positives' pushes, through shared
# weights, are what lowered it at first order, and alone they keep more of it down. What keeps
# positives down in the whole batch is the negatives' push as a whole: every arm that cuts it,
# whichever negatives it cuts, ends with under half of plain `no_is`'s starved positives on every
# batch (the third check). Giving 0 to the negatives whose $w$ fell is one such cut, and not a
# special one: as many negatives picked at random do about as well (nearer it than plain `no_is`
# on every batch, the fourth check), and scaling every negative by 0.3 does too (its row). Which
# negatives are cut matters less, though not nothing: cutting the highest-$w$ ones instead, which
# leaves the fallen ones pushed, leaves more positives down on most batches (the fifth check).
# The clip and ReSPO both cut the negatives' push once their $w$ falls (the clip gives a negative
# below its band 0, ReSPO's $\phi_-$ falls like $w^3$ near 0). And over several steps Adam's step
# length is not needed: plain SGD at learning rate 1, which after one step starved at most one
# positive, starves more over the 16 steps with `no_is` on the whole batch, on every batch,
# barely on some (the last check and row).
#
# *Takeaway:* a positive becomes low-$w$ through the batch's update on shared weights (its own
# term raises it): at first order its $\log\pi$ changes by $\eta\sum_iA_i\langle\nabla\log\pi_j,\nabla\log\pi_i\rangle$,
# negative for the positives whose gradient points against the batch's, even with the negatives
# left out, and for a short step that count names exactly the ones that fall. One long Adam step
# (about lr on every weight) takes some past $w=0.8$ at once, and at the rates used here it is
# beyond the linear regime, so more fall than first order names; a short SGD step moves them by
# too little in one step, though over many steps, with every negative pushed at $\phi=1$ (the
# ones already below 0.8 too), SGD starves them too. Each starved positive's own push brings it
# back, unless the negatives keep being pushed at full strength; cutting their push, by about
# as much whichever ones are cut, lets them come back. What a method gives a low-$w$ positive is the size of that own term;
# whether a larger one brings it back sooner is §4's question (with everything else the clip's:
# sooner on most batches, §4's `seq_clip_lowpos1` arm).
#
# ## 3. Symptom: what each method gives the low-$w$ positives
#
# At each of the 15 off-policy sequence-clip steps of §2, ask every method's kernel for its
# coefficient on the same drifted batch (for a token-level method, the mean of its token
# coefficients over the response), and split the positives by where their sequence weight
# sits: below the clip band ($w<0.8$), inside it, above it ($w>1.2$). Averaged over the steps
# (the first, on-policy step gives everyone 1):

# %%
methods = ("seq_clip", "grpo", "gspo", "cispo", "vespo", "respo_wtilt")
regions = {"below (w < 0.8)": lambda lw: lw < math.log(0.8),
           "inside": lambda lw: (lw >= math.log(0.8)) & (lw <= math.log(1.2)),
           "above (w > 1.2)": lambda lw: lw > math.log(1.2)}
given = {m: {r: [] for r in regions} for m in methods}
for logp, lw in zip(clip_run[1:], log_w[1:]):
    for m in methods:
        phi_t, _ = coefficients(logp, batch.old_logp, adv, batch.mask, StudyLossConfig(agg=AGG, method=m))       # [B, T]
        per_response = (phi_t * batch.mask).sum(-1) / lengths                                       # [B]
        for r, inside in regions.items():
            rows = positive & inside(lw)
            if rows.any():
                given[m][r].append(per_response[rows].mean().item())
fig, ax = plt.subplots(figsize=(8, 2.8))
x = torch.arange(len(methods)).float()
for k, (r, colour) in enumerate(zip(regions, ("tab:red", "0.6", "tab:orange"))):
    bars = ax.bar(x + (k - 1) * 0.27, [sum(given[m][r]) / len(given[m][r]) for m in methods], 0.27, color=colour,
                  label=r, edgecolor="0.3", lw=0.5)
    ax.bar_label(bars, fmt="%.2f", fontsize=6, padding=1)                   # a bar of height 0 still reads 0.00
ax.axhline(1.0, color="k", ls=":", lw=0.8)
ax.set_xticks(x.tolist(), methods)
ax.set(ylabel="mean φ of a positive", title="what a positive receives, by where its w sits", ylim=(0, 1.45))
ax.legend(fontsize=7, ncol=3, loc="upper left")
fig.tight_layout()
plt.show()
for m in methods:
    print(f"{m:>9}: " + "  ".join(f"{r} {sum(v) / len(v):.2f}" for r, v in given[m].items()))
gspo_eps = METHOD_TABLE["gspo"][2]                                            # (eps_low, eps_high), the kernel's own
print(f"GSPO clips its length-normalised ratio s = w^(1/|y|) to [1 - {gspo_eps[0]:g}, 1 + {gspo_eps[1]:g}]; "
      f"the sequence clip w to [1 - {METHOD_TABLE['seq_clip'][2][0]:g}, 1 + {METHOD_TABLE['seq_clip'][2][1]:g}]")
from research import figures  # noqa: E402
print("the README's figures, over the toy's evaluation runs (research/figures.py): "
      + "; ".join(f"{figures.FIGURES[name].what} {figures.value(name)}"
                  for name in ("toy_phi_low_w_seq_clip", "toy_phi_low_w_respo")))

# %% [markdown]
# Below the band the sequence clip gives a positive only its weight $w$; ReSPO's
# nearly flat branch gives about 1; VESPO's $w^2e^{-3(w-1)}$ is above 1 at these moderate
# weights (it peaks at $w=2/3$) and starves only far lower. The token-level methods (GRPO,
# CISPO) and GSPO, whose length-normalised ratio stays near 1, keep most of it: the sharp
# starvation is a *sequence-level* clip's. Above the band (the clip's trust region for
# positives, docs/math.md §2) the sequence clip and GSPO
# (whose upper band, printed, is so narrow that any positive whose tokens rose on average is
# above it) give a positive 0 and VESPO little,
# GRPO zeroes only its tokens above 1.2, while CISPO and ReSPO keep pushing.
#
# The last line is the same coefficient as the README and `research/toy/README.md` give it: averaged
# over whole training runs on fresh seeds, at each method's selected learning rate, where the
# bars above are one batch of one warm policy; the two need not agree in their digits.
#
# **Retained positive signal by length.** A mean over the positives below 0.8 hides what the
# clip does to the positives above 1.2, and a comparison of "low-$w$ lengths" can be faked by a
# symmetric drift that sends long responses into both tails. The statistic that counts both
# tails at once: per length tercile of the positives, the share of their on-policy push a method
# keeps, $R_m=\sum_{A>0}\phi_mA\,/\sum_{A>0}A$ (1 for every method on-policy; `is` keeps $w$), on the
# same 15 drifted steps for every method:

# %%
retained_methods = ("seq_clip", "grpo", "gspo", "cispo", "vespo", "respo_wtilt", "respo_pos_clip_neg", "topr", "is")
pos_cuts = torch.quantile(lengths[positive].float(), torch.tensor([1 / 3, 2 / 3]))
pos_tercile = torch.bucketize(lengths.float(), pos_cuts, right=True)                 # [B] 0 shortest, 2 longest


def retained_by_tercile(run, episodes, a, methods):
    """R_m per length tercile of the positives (shortest first), mean over the off-policy steps of `run`."""
    n_tokens = episodes.mask.sum(-1)
    pos = a > 0
    tercile = torch.bucketize(n_tokens.float(), torch.quantile(n_tokens[pos].float(), torch.tensor([1 / 3, 2 / 3])),
                              right=True)
    out = {m: torch.zeros(3) for m in methods}
    for logp in run[1:]:
        for m in methods:
            phi_t, _ = coefficients(logp, episodes.old_logp, a, episodes.mask, StudyLossConfig(agg=AGG, method=m))
            per_response = (phi_t * episodes.mask).sum(-1) / n_tokens                        # [B]
            for k in range(3):
                rows = pos & (tercile == k)
                out[m][k] += (per_response[rows] * a[rows]).sum() / a[rows].sum() / (len(run) - 1)
    return out


retained = retained_by_tercile(clip_run, batch, adv, retained_methods)
print("R_m by length tercile of the positives, mean over the 15 off-policy steps (shortest | middle | longest):")
for k in range(3):
    rows = positive & (pos_tercile == k)
    print(f"  tercile {k + 1}: {int(rows.sum())} positives of {int(lengths[rows].min())}-{int(lengths[rows].max())} tokens")
for m, r in retained.items():
    print(f"  {m:<19} " + " | ".join(f"{v:.2f}" for v in r.tolist()))
confirm("the sequence clip and GSPO keep under half of the positives' push in every tercile; respo_wtilt, TOPR, CISPO over 0.8",
        max(0.0, *(retained[m].max().item() - 0.5 for m in ("seq_clip", "gspo")),
            *(0.8 - retained[m].min().item() for m in ("respo_wtilt", "topr", "cispo"))), 1e-12)
clip_runs = {seed: (clip_run if seed == 6 else drift_run("seq_clip", advantages=a, episodes=episodes)[0])
             for seed, (episodes, a) in band_batches.items()}                   # §4 reads them again
retained_all = {seed: retained_by_tercile(clip_runs[seed], episodes, a, ("seq_clip", "gspo", "respo_wtilt"))
                for seed, (episodes, a) in band_batches.items()}
print("the same on all five batches (shortest | middle | longest):")
for m in ("seq_clip", "gspo", "respo_wtilt"):
    print(f"  {m:<9} " + "   ".join(f"batch {seed}: " + "|".join(f"{v:.2f}" for v in retained_all[seed][m].tolist())
                                   for seed in band_seeds))
gradient_batches = [seed for seed in band_seeds
                    if retained_all[seed]["seq_clip"][2] < retained_all[seed]["seq_clip"][0] - 0.05]
print(f"batches where the clip's longest tercile keeps more than 0.05 less than its shortest: "
      f"{', '.join(map(str, gradient_batches)) or 'none'} ({len(gradient_batches)} of {len(band_seeds)})")
confirm("on every batch the clip keeps at most about half (under 0.55) of every tercile's push, respo_wtilt over 0.8",
        max(0.0, *(retained_all[seed]["seq_clip"].max().item() - 0.55 for seed in band_seeds),
            *(0.8 - retained_all[seed]["respo_wtilt"].min().item() for seed in band_seeds)), 1e-12)
confirm("on no batch does the clip's longest tercile keep more than 0.05 above its shortest",
        max(0.0, *((retained_all[seed]["seq_clip"][2] - retained_all[seed]["seq_clip"][0]).item() - 0.05
                   for seed in band_seeds)), 1e-12)
given_mean = {m: {r: sum(v) / len(v) for r, v in given[m].items()} for m in methods}
confirm("below the band: the sequence clip gives under 0.8, GRPO, GSPO and CISPO over 0.8, respo_wtilt and VESPO over 1",
        max(0.0, given_mean["seq_clip"]["below (w < 0.8)"] - 0.8,
            *(0.8 - given_mean[m]["below (w < 0.8)"] for m in ("grpo", "gspo", "cispo")),
            *(1 - given_mean[m]["below (w < 0.8)"] for m in ("respo_wtilt", "vespo"))), 1e-12)

# %% [markdown]
# Read the table by row, both tails in every sum. The sequence clip and GSPO keep under half of
# the positives' on-policy push in every tercile of §2's batch, GSPO least (its tiny upper band
# zeroes every positive whose tokens rose on average); ReSPO, TOPR and CISPO keep more than 0.8
# (the first check). On all five batches the clip keeps about half or less of every tercile's
# push and ReSPO more than 0.8 (the second table and its check). Whether the clip's loss falls
# more on the *long* positives is what the columns answer, and it depends on the batch: on §2's
# batch its longest tercile keeps about what its shortest does, on the batches listed it keeps
# less, and on none does it keep more (the printed list and the last check). So on this toy the
# clip takes signal from positives of every length, in both tails, and on some batches more from
# the long ones; five batches of one warm policy do not say how common that is. `research/notebooks/tiny_qwen3_records`
# computes the same table on the tiny Qwen3's batches.
#
# *Takeaway:* the symptom is a coefficient: a sequence clip multiplies a drifted correct
# answer's gradient by $w<0.8$ and an already-improved one's by 0.
#
# ## 4. Consequence: how the starved positives come back, under each method
#
# Same warm policy, same learning rate (0.01), 16 full-batch steps: once with the sequence
# clip, once with ReSPO, on five batches (the one of §2 and the four of its controls). On each,
# take the positives that fall below $w=0.8$ at some step under the clip (the ever-low ones)
# and follow the mean of their $\log\pi(y)-\log\mu(y)$ under both methods; right, the share
# of all positives below $0.8$. Lines are means over the five batches, bands their range.

# %%
curves = {"sequence clip": ([], []), "respo_wtilt": ([], [])}                       # per batch: ever-low mean, starved share
own_term = []                                                                 # per batch: starved after 2 steps, clip / lowpos1
print("per batch: ever-low positives | starved positives after 1, 2, 15 steps under the clip | under respo_wtilt "
      "| under the clip with 1 on its starved (seq_clip_lowpos1) | mean log w of the ever-low after 15 steps, clip / respo_wtilt")
for seed, (episodes, a) in band_batches.items():
    pos = a > 0
    runs = {"sequence clip": log_weights(clip_runs[seed], episodes),
            "respo_wtilt": log_weights(drift_run("respo_wtilt", advantages=a, episodes=episodes)[0], episodes)}
    lowpos1_lw = log_weights(drift_run("seq_clip_lowpos1", advantages=a, episodes=episodes)[0], episodes)
    ever = pos & (runs["sequence clip"] < math.log(0.8)).any(0)
    for name, lw in runs.items():
        curves[name][0].append(lw[:, ever].mean(1))
        curves[name][1].append((pos & (lw < math.log(0.8))).sum(1) / pos.sum())
    clip_lw, respo_lw = runs["sequence clip"], runs["respo_wtilt"]
    own_term.append((starved(clip_lw[2], pos), starved(lowpos1_lw[2], pos)))
    print(f"  batch {seed:>2}: {int(ever.sum()):>2} of {int(pos.sum())} | "
          + " ".join(f"{starved(clip_lw[s], pos):>2}" for s in (1, 2, 15)) + " | "
          + " ".join(f"{starved(respo_lw[s], pos):>2}" for s in (1, 2, 15)) + " | "
          + " ".join(f"{starved(lowpos1_lw[s], pos):>2}" for s in (1, 2, 15))
          + f" | {clip_lw[-1, ever].mean():+.2f} / {respo_lw[-1, ever].mean():+.2f}")
fig, axes = plt.subplots(1, 2, figsize=(9, 3))
for k, (ax, ylabel) in enumerate(zip(axes, ("mean log π(y) − log μ(y) of the ever-low positives",
                                            "share of positives with w < 0.8"))):
    for name, colour in (("sequence clip", "tab:blue"), ("respo_wtilt", "tab:red")):
        per_batch = torch.stack(curves[name][k]).float()                      # [batches, steps]
        ax.plot(range(16), per_batch.mean(0), "o-", ms=3, color=colour, label=name)
        ax.fill_between(range(16), per_batch.min(0).values, per_batch.max(0).values, color=colour, alpha=0.2)
    ax.set(xlabel="optimizer step on the batch", ylabel=ylabel)
    ax.set_ylabel(ylabel, fontsize=8)
axes[0].axhline(math.log(0.8), color="k", ls=":", lw=1)
axes[0].axhline(0.0, color="0.5", lw=0.8)
axes[0].legend(fontsize=7)
fig.suptitle(f"{len(band_batches)} batches: mean (line) and range (band)", fontsize=9)
fig.tight_layout()
plt.show()
last = {name: torch.stack(c[0])[:, -1] for name, c in curves.items()}
end_share = {name: torch.stack(c[1])[:, -1] for name, c in curves.items()}
second = {name: torch.stack(c[1])[:, 2] for name, c in curves.items()}
print(f"ever-low positives end higher under respo_wtilt than under the clip on "
      f"{int((last['respo_wtilt'] > last['sequence clip']).sum())} of {len(band_batches)} batches; "
      f"more positives below 0.8 after 15 steps under respo_wtilt on "
      f"{int((end_share['respo_wtilt'] > end_share['sequence clip']).sum())}, under the clip on "
      f"{int((end_share['respo_wtilt'] < end_share['sequence clip']).sum())}; fewer below 0.8 after two steps under respo_wtilt on "
      f"{int((second['respo_wtilt'] < second['sequence clip']).sum())}")
sooner = sum(low < clip for clip, low in own_term)
print(f"after two steps the clip with 1 on its starved leaves fewer positives below 0.8 than the clip on {sooner} of "
      f"{len(own_term)} batches, more on {sum(low > clip for clip, low in own_term)}")
confirm("a larger own term alone (seq_clip_lowpos1 against the clip) leaves fewer starved after two steps on most "
        "batches and more on none",
        max(0, len(own_term) // 2 + 1 - sooner, sum(low > clip for clip, low in own_term)), 1e-12)

# %% [markdown]
# What the printout shows, batch by batch: under the clip the starved count rises at the first
# step and then falls back, as §2 measured (each starved positive's own push brings it back
# while the negatives' push is cut: the clip gives 0 to the negatives below its band, §2's
# arms). Does a larger own term bring them back sooner? `seq_clip_lowpos1` is the clip with one
# change, 1 instead of $w$ on a positive below the band: after two steps it leaves fewer of them
# below 0.8 than the clip on most batches and more on none (the last line and its check). So,
# with everything else equal, yes. ReSPO is not that comparison: it also pushes the positives
# above the band, which the clip gives 0, and has its own negative branch; after the second
# step its count below $0.8$ is lower than the clip's on few of the batches, and after 15 steps
# each method leaves more of them below on some batches (both printed). Which of ReSPO's other
# differences holds its count up is not separated here. The mean $\log w$ of the ever-low
# positives ends higher under ReSPO (left; the count of batches where it does is printed) while
# the count below $0.8$ does not fall faster (right). Five batches of one warm policy: this shows
# the mechanism, not a rate.
#
# **Does it cost learning?** Learning curves need several seeds and learning rates, and an
# honest comparison is at *equal* learning rates: a method's best learning rate is part of
# the method (at the same rate some methods collapse and others do not: exercise 1 in §11
# asks which collapse at the largest rate). The toy's
# selection runs (`research/toy/results/selection/runs.jsonl`, written by `python -m research.toy.select`)
# ran every method at three learning rates, reuse 4 and 16, seeds 0–2; they are read back here,
# not rerun. These are the seeds the learning rates were chosen on, 3 of them: read them as a
# sweep, not as an evaluation (that is `research/toy/README.md`, on fresh seeds).

# %%
records = [json.loads(line) for line in open(ROOT / "research/toy/results/selection/runs.jsonl")]
default_kernel = {"wtilt_alpha_pos": 0.0, "wtilt_lambda_pos": 0.1, "wtilt_alpha_neg": 3.0, "wtilt_lambda_neg": 2.0}
sweep = [r for r in records if r["method"] != "respo_wtilt" or r["loss"] == default_kernel]
lrs = sorted({r["lr"] for r in sweep})


def early_auc(method, reuse, lr):
    """(mean, 95% half-width) over seeds of the early AUC of one sweep cell."""
    return mean_ci([r["early_auc"] for r in sweep if (r["method"], r["reuse"], r["lr"]) == (method, reuse, lr)])


colours = dict(zip(methods, ("tab:blue", "tab:green", "tab:orange", "tab:purple", "tab:brown", "tab:red")))
fig, axes = plt.subplots(1, 3, figsize=(10, 3))
for ax, reuse in zip(axes[:2], (4, 16)):
    for m in methods:
        means = [early_auc(m, reuse, lr)[0] for lr in lrs]
        ax.plot(lrs, means, "o-", color=colours[m], lw=2.2 if m == "respo_wtilt" else 1.2, label=m)
    ax.set(xscale="log", xlabel="learning rate", title=f"R = {reuse}: early AUC (first 15 batches)")
    ax.set_xticks(lrs, [f"{lr:g}" for lr in lrs])
    ax.minorticks_off()
axes[0].set_ylabel("mean over seeds 0-2")
axes[0].legend(fontsize=7, ncol=2)
for m in ("seq_clip", "grpo", "respo_wtilt"):
    curves = torch.tensor([r["reward_curve"] for r in sweep if (r["method"], r["reuse"], r["lr"]) == (m, 16, 0.01)])
    axes[2].plot(range(1, curves.shape[1] + 1), curves.mean(0), color=colours[m], lw=2.2 if m == "respo_wtilt" else 1.2,
                 label=m)
axes[2].set(xlabel="rollout batch", title="R = 16, all at lr 0.01: training reward")
axes[2].legend(fontsize=7)
fig.tight_layout()
plt.show()
for reuse in (4, 16):
    print(f"early AUC at R = {reuse}, mean ± 95% interval over 3 seeds:")
    for m in methods:
        row = [early_auc(m, reuse, lr) for lr in lrs]
        print(f"{m:>9}: " + "  ".join(f"lr {lr:<5g} {v:.3f} ± {h:.3f}" for lr, (v, h) in zip(lrs, row)))
final = {m: mean_ci([r["final_reward"] for r in sweep if (r["method"], r["reuse"], r["lr"]) == (m, 16, 0.01)])[0]
         for m in ("seq_clip", "grpo", "respo_wtilt")}
print("R = 16, lr 0.01, final training reward (last 6 batches), mean over 3 seeds: "
      + ", ".join(f"{m} {v:.2f}" for m, v in final.items()))
overlap_r4 = []
for lr in lrs:
    cells = [early_auc(m, 4, lr) for m in methods]
    overlap_r4.append(max(v - h for v, h in cells) - min(v + h for v, h in cells))   # > 0: some intervals disjoint
early_r16 = {m: early_auc(m, 16, 0.01)[0] for m in methods}
confirm("at R = 4 every method's interval overlaps every other's at each lr (within noise)", max(0.0, *overlap_r4), 1e-12)
confirm("at R = 16 and lr 0.01 respo_wtilt has the highest mean early AUC",
        max(0.0, max(v for m, v in early_r16.items() if m != "respo_wtilt") - early_r16["respo_wtilt"]), 1e-12)
confirm("and the end-of-run order there is not the early one (seq_clip, grpo, respo_wtilt)",
        float(sorted(final, key=final.get) == sorted(final, key=early_r16.get)), 1e-12)

# %% [markdown]
# Read the sweep at a fixed learning rate, as what these records show: three runs per cell, on
# the machine that wrote them (the records carry no CPU setting). At R = 4 the methods are within
# noise of each other at every learning rate. At R = 16 and the shared learning rate 0.01, ReSPO
# has the highest mean early AUC in the records (the printout), with intervals that overlap most
# others at 3 seeds; a mean of three runs moves when one run does, and a rerun elsewhere can
# part from its record (§11 reruns one seed of the lr 0.03, R = 16 cells beside its record and
# prints whether they agree).
# The ranking also moves with the learning rate: at 0.03 some methods collapse at R = 16 and
# others do not (exercise 1 in §11 asks you to predict which before reading it off). In the
# evaluation (`research/toy/README.md`) each method runs at its own chosen rate, ReSPO's the largest, so
# part of its early lead there can be the step rather than the coefficient; `research/toy/README.md`'s
# equal-rate comparison is the control for that, and these three seeds are not. And early is not final: at lr 0.01 and
# R = 16 (right, and the last printed line) the end-of-run order is not the early one.
#
# *Takeaway:* starvation costs the drifted positives their gradient (§3). What that costs in
# learning, these records do not separate: at $R=4$ the methods are within noise at every
# learning rate, and at $R=16$ and the shared rate 0.01 ReSPO leads early, with overlapping
# intervals, and the end-of-run order is not the early one (the three checks). Which methods
# collapse at the largest rate is §11's exercise.
#
# ## 5. The other half: over-generated negatives take the update
#
# The same drifted batch, seen from the negatives: what share of the whole update
# $\sum_i|\phi_iA_i|$ goes to negatives the policy now over-generates ($w>1.2$)? A share is only
# large or small against a reference, and the right ones are what those negatives get when the
# coefficient ignores $w$ (`no_is`, $\phi=1$) and when it is the exact weight (`is`, $\phi=w$); both
# are drawn as bars beside the methods.

# %%
def high_negative_shares(episodes, a, logps, log_ws, arms, parts=False):
    """Mean over steps of the share of sum |phi A| that goes to negatives with w > 1.2, per arm; and of
    those negatives, the share beyond w = 2.145, where respo_wtilt's phi_- falls back below 1.

    parts: also return, per arm, the mean over steps of the share's numerator (sum |phi A| over those
    negatives) and of its denominator (sum |phi A| over the whole batch).
    """
    shares, numerators, totals, beyond = {m: [] for m in arms}, {m: [] for m in arms}, {m: [] for m in arms}, []
    steps_lengths = episodes.mask.sum(-1)
    for logp, lw in zip(logps, log_ws):
        high = (a < 0) & (lw > math.log(1.2))
        beyond.append(((high & (lw > math.log(2.145))).sum() / high.sum().clamp(min=1)).item())
        for m in arms:
            phi_t, _ = coefficients(logp, episodes.old_logp, a, episodes.mask, StudyLossConfig(agg=AGG, method=m))
            size = ((phi_t * episodes.mask).sum(-1) / steps_lengths * a).abs()            # [B] |phi A| per response
            shares[m].append((size[high].sum() / size.sum()).item())
            numerators[m].append(size[high].sum().item())
            totals[m].append(size.sum().item())
    mean = lambda d: {m: sum(v) / len(v) for m, v in d.items()}
    if parts:
        return mean(shares), sum(beyond) / len(beyond), mean(numerators), mean(totals)
    return mean(shares), sum(beyond) / len(beyond)


# %%
arms5 = ("no_is", "is") + methods
high_share, beyond_peak = high_negative_shares(batch, adv, clip_run[1:], log_w[1:], arms5)
colours5 = {"no_is": "0.75", "is": "0.35", **colours}
x5 = torch.arange(len(arms5)).float()
fig, ax = plt.subplots(figsize=(8, 2.6))
bars = ax.bar(x5, [high_share[m] for m in arms5], 0.6, color=[colours5[m] for m in arms5], edgecolor="0.3", lw=0.5)
ax.margins(y=0.15)                                                            # room for the labels
ax.bar_label(bars, labels=[f"{high_share[m]:.1%}" for m in arms5], fontsize=7, padding=1)
ax.set_xticks(x5.tolist(), [f"{m}\n(reference)" if m in ("no_is", "is") else m for m in arms5], fontsize=8)
ax.set(ylabel="share of Σ|φA|", title="the update taken by negatives with w > 1.2 (§2's reused batch)")
fig.tight_layout()
plt.show()
print("share of the update taken by the negatives with w > 1.2: " + ", ".join(f"{m} {high_share[m]:.1%}" for m in arms5))
print(f"of those negatives, {beyond_peak:.0%} are beyond w = 2.145 (mean over the steps); respo_wtilt's phi_- is above 1 "
      f"on (1, 2.145) with its peak {power_tilt(torch.tensor([math.log(1.5)]), 3.0, 2.0).item():.2f} at w = 1.5")
confirm("the sequence clip and GSPO give them more than twice what the exact weight does",
        max(0.0, 2 * high_share["is"] - min(high_share["seq_clip"], high_share["gspo"])), 1e-12)
confirm("phi_- > 1 exactly between w = 1 and 2.145 (the root of 3 log w = 2 (w - 1))",
        abs(power_tilt(torch.tensor([math.log(2.145)], dtype=torch.float64), 3.0, 2.0).item() - 1), 2e-3)
confirm("GRPO and CISPO give them within 2 points of no_is",
        max(abs(high_share[m] - high_share["no_is"]) for m in ("grpo", "cispo")), 0.02)

# %% [markdown]
# A share is a ratio: what an arm gives these negatives (the numerator, $\sum|\phi A|$ over them)
# over what it gives the whole batch (the denominator). Two arms can differ in their share because
# they differ in either. Per response, ReSPO gives a negative at weight $w$ the coefficient
# $\phi_-(w)=w^3e^{-2(w-1)}$, so against the exact weight $\phi_-(w)/w=w^2e^{-2(w-1)}$, below 1 at every
# $w>1$; against `no_is` it is $\phi_-(w)$ itself, above 1 on $(1, 2.145)$. The next cell prints the
# numerator and the denominator of each reference arm, on §2's batch and on the four others (each
# under its own 15 clip steps, as in §3):

# %%
ratio_grid = torch.linspace(math.log(1.01), math.log(50.0), 5001, dtype=torch.float64)       # log w above 1
ratio_to_w = power_tilt(ratio_grid, 3.0, 2.0) / ratio_grid.exp()
print(f"phi_-(w) / w on 1.01 <= w <= 50: largest {ratio_to_w.max():.4f} (at w = 1.01); at w = 1.2, 1.5, 2: "
      + ", ".join(f"{(w ** 2 * math.exp(-2 * (w - 1))):.3f}" for w in (1.2, 1.5, 2.0)))
ref_arms = ("no_is", "is", "respo_wtilt", "seq_clip")
parts5 = {}
for seed, (episodes, a) in band_batches.items():
    run = clip_runs[seed]
    parts5[seed] = high_negative_shares(episodes, a, run[1:], log_weights(run, episodes)[1:], ref_arms, parts=True)
print("negatives with w > 1.2, mean over the steps: numerator | denominator | share, per arm")
for seed in band_seeds:
    share, _, numerator, total = parts5[seed]
    print(f"  batch {seed:>2}: " + "   ".join(f"{m} {numerator[m]:.2f} | {total[m]:.1f} | {share[m]:.1%}" for m in ref_arms))
above_is = [seed for seed in band_seeds if parts5[seed][0]["respo_wtilt"] > parts5[seed][0]["is"]]
print(f"respo_wtilt's share above the exact weight's on batches {', '.join(map(str, above_is)) or 'none'} "
      f"({len(above_is)} of {len(band_seeds)}); its numerator above no_is's on "
      f"{sum(parts5[seed][2]['respo_wtilt'] > parts5[seed][2]['no_is'] for seed in band_seeds)} of {len(band_seeds)}")
confirm("phi_-(w) < w at every w > 1: per response respo_wtilt gives an over-generated negative less than the exact weight",
        max(0.0, ratio_to_w.max().item() - 1), 1e-12)
confirm("on every batch respo_wtilt's numerator is below the exact weight's and above no_is's",
        max(0.0, *(parts5[seed][2]["respo_wtilt"] - parts5[seed][2]["is"] for seed in band_seeds),
            *(parts5[seed][2]["no_is"] - parts5[seed][2]["respo_wtilt"] for seed in band_seeds)), 1e-12)
confirm("the sequence clip's numerator is the exact weight's (it gives these negatives w), on every batch",
        max(abs(parts5[seed][2]["seq_clip"] - parts5[seed][2]["is"]) for seed in band_seeds), 1e-6)

# %% [markdown]
# Against the references the bars read differently from a count of responses. The sequence
# clip and GSPO give these negatives more than twice the share the exact weight gives them (the
# first check under the figure). For the clip the numerator is the exact weight's, to the digit
# (the last check: both give these negatives $w$), so its larger share is all in the
# denominator: it zeroes the positives that rose and the negatives that fell, and the same few
# responses take a larger share of what is left.
#
# ReSPO against the two references, per response: most of these negatives sit at moderate
# weights (the share beyond 2.145 is printed under the figure), where $\phi_->1$ (its peak 1.24 at
# $w=1.5$), so on every batch its numerator is above `no_is`'s: against a coefficient that ignores
# $w$, its negative branch *raises* them. Against the exact weight it gives every one of them less
# ($\phi_-(w)<w$ for $w>1$, the first check; its numerator below `is`'s on every batch, the
# second). Its share can still be above `is`'s, as on §2's batch, because its denominator is
# smaller too; on other batches it is below (the batches are listed). So "ReSPO gives them more
# than `is`" is true of a share on some batches and of no single response. The token-level GRPO
# and CISPO, whose per-token ratios stay nearer 1, give these negatives about the share `no_is`
# does.
#
# *Takeaway:* read a coefficient per response and a share of the update as two different
# things. A sequence clip gives over-generated negatives the same $w$ as `is` and hands them more
# of the update than `is` would, because of what it zeroes elsewhere. ReSPO's negative branch
# gives each of them less than the exact weight at every $w>1$; against $\phi=1$ it raises them at
# moderate weights and cuts them only in the far tail (beyond $w=2.145$).
#
# ## 6. Staleness: what `--lag` does to $w$
#
# In asynchronous RL the sampler runs behind the learner. `train.py --lag L` samples each
# rollout batch with the weights of $L$ iterations ago (`offpolicy.LaggedPolicy`), so $\log\mu$
# is the lagged policy's and the *first* of the $R$ steps already sees $w=\pi_{\rm now}/\mu_{\rm lag}\neq1$;
# with $L=0$ and $R=1$ every method is the on-policy gradient. Toy-sized: train a copy of the
# warm policy on four more rollout batches ($R=4$, lr 0.01), keeping its weights after each;
# sample §2's prompts with the weights of $L$ batches ago, and read $w$ under the newest
# weights before any step on that batch.

# %%
def first_step_view(label, episodes, logp):
    """One printed line: how far w sits from 1 at the first step, and what the clip and respo_wtilt give positives."""
    a, _ = group_advantages(env.reward(episodes), 8)
    pos, neg = a > 0, a < 0
    lw = sequence_log_weight(logp, episodes.old_logp, episodes.mask)                  # [B]
    q = torch.quantile(lw.exp(), torch.tensor([0.1, 0.5, 0.9]))
    given = []
    for method in ("seq_clip", "respo_wtilt"):
        phi, _ = coefficients(logp, episodes.old_logp, a, episodes.mask, StudyLossConfig(agg=AGG, method=method))
        given.append((phi[:, 0][pos]).mean().item())                                  # a sequence method: one phi per row
    print(f"  {label:<6} {q[0]:>5.2f} {q[1]:>5.2f} {q[2]:>5.2f}   {int((pos & (lw < math.log(0.8))).sum()):>2} of {int(pos.sum()):<3}"
          f"  {int((neg & (lw > math.log(1.2))).sum()):>3} of {int(neg.sum()):<4} {given[0]:.2f} / {given[1]:.2f}")
    return given


kept = [copy.deepcopy(policy)]
learner = copy.deepcopy(policy)
reuse_loop(env, learner, "respo_wtilt", lr=0.01, reuse=4, iterations=4, seed=2, after_batch=lambda p: kept.append(copy.deepcopy(p)))
print("  lag    w at the first step     positives   negatives   mean phi on positives")
print("         10%   50%   90%       w < 0.8     w > 1.2     seq clip / respo_wtilt")
lag_given = {}
for lag in (0, 1, 2, 4):
    episodes = env.sample(kept[-1 - lag], prompts, torch.Generator().manual_seed(6))   # mu: the weights of lag batches ago
    lag_given[lag] = first_step_view(f"L = {lag}", episodes, env.log_probs(learner, episodes).detach())
confirm("at every lag above 0 the clip gives the positives a mean coefficient below 0.6, respo_wtilt within 0.05 of 1",
        max(0.0, *(lag_given[lag][0] - 0.6 for lag in (1, 2, 4)), *(abs(lag_given[lag][1] - 1) - 0.05 for lag in (1, 2, 4))),
        1e-12)
stale = env.sample(kept[-3], prompts, torch.Generator().manual_seed(6))                 # the L = 2 batch
stale_adv, _ = group_advantages(env.reward(stale), 8)
stale_logp = env.log_probs(learner, stale).detach()
stale_share, stale_beyond, stale_numerator, stale_total = high_negative_shares(
    stale, stale_adv, [stale_logp], [sequence_log_weight(stale_logp, stale.old_logp, stale.mask)], arms5, parts=True)
print(f"§5's question on the L = 2 batch at its first step: {stale_beyond:.0%} of its negatives with w > 1.2 are beyond "
      "2.145; share of the update they take: " + ", ".join(f"{m} {stale_share[m]:.1%}" for m in arms5))
print("  numerator | denominator: " + "   ".join(f"{m} {stale_numerator[m]:.2f} | {stale_total[m]:.1f}" for m in ref_arms))
confirm("on the stale batch, which reaches the far tail, respo_wtilt's numerator is below no_is's as well as the exact weight's",
        max(0.0, 0.5 - stale_beyond, stale_numerator["respo_wtilt"] - stale_numerator["no_is"],
            stale_numerator["respo_wtilt"] - stale_numerator["is"]), 1e-12)

# %% [markdown]
# With no lag $w=1$ exactly at the first step; each batch of lag widens the spread of $w$
# before any step is taken, and a lagged batch starts with positives already below the clip's
# band and negatives above it (the printout): the clip gives its positives a mean coefficient
# well below 1 at every lag above 0, ReSPO about 1. Lag and reuse compound: the $R$ steps drift $w$
# further from wherever the lag left it. This is why a lagged run is a test of a coefficient
# even at $R=1$, and why `research/notebooks/tiny_qwen3_records`' `--lag` cells exist.
#
# The last lines are §5's question again, on the $L=2$ batch: most of its over-generated
# negatives are beyond $w=2.145$, in the far tail, where $\phi_-<1$: there ReSPO gives them less than
# `no_is` as well as less than `is` (the check, on the numerators), a cut against both references.
# Against $\phi=1$, then, the negative branch acts as a cut only where the drift reaches that tail:
# §5's reused batch did not, this stale one does; against the exact weight it gives less on both.
#
# ## 7. Stuck runs: all-equal groups, and Adam moving weights on zero advantages
#
# A group whose responses all get the same reward has $A_i=0$ for every response: no kernel
# gives it any gradient, whatever $\phi$. Yet Adam can still move the weights on such a
# mini-batch: its step is $\mathrm{lr}\cdot\hat m/(\sqrt{\hat v}+\epsilon)$, and its momentum
# $\hat m$ remembers the last steps with signal. Below: the gradient of one all-wrong group of
# §2's batch, then 4 Adam (or SGD) steps on the whole batch followed by 4 steps on that group
# alone.

# %%
group_reward = env.reward(batch).view(-1, 8)                                           # [groups, 8]
silent = int((group_reward.std(1) == 0).nonzero()[0])
rows = torch.arange(silent * 8, silent * 8 + 8)
pol = copy.deepcopy(policy)
loss, _ = policy_loss(env.log_probs(pol, batch[rows]), batch[rows].old_logp, adv[rows], batch[rows].mask, StudyLossConfig(method="respo_wtilt", agg=AGG))
grad_norm = torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, list(pol.parameters()))]).norm()
print(f"signal-free groups in §2's batch: {int((group_reward.std(1) == 0).sum())} of {len(group_reward)}; "
      f"group {silent} (target {batch.prompts[rows[0]].item()}, rewards {group_reward[silent].tolist()}): gradient norm {grad_norm:.1f}")
silent_moves = {}
for name, make in (("Adam lr 0.01", lambda ps: torch.optim.Adam(ps, lr=0.01)), ("SGD lr 1", lambda ps: torch.optim.SGD(ps, lr=1.0))):
    pol = copy.deepcopy(policy)
    opt = make(pol.parameters())
    moved = []
    for step in range(8):
        part, a = (batch, adv) if step < 4 else (batch[rows], adv[rows])
        loss, _ = policy_loss(env.log_probs(pol, part), part.old_logp, a, part.mask, StudyLossConfig(method="respo_wtilt", agg=AGG))
        opt.zero_grad()
        loss.backward()
        before = torch.nn.utils.parameters_to_vector(pol.parameters()).detach().clone()
        opt.step()
        moved.append((torch.nn.utils.parameters_to_vector(pol.parameters()) - before).norm().item())
    print(f"  {name:<13} weights moved per step (L2): with signal " + " ".join(f"{m:.3f}" for m in moved[:4])
          + " | on the signal-free group " + " ".join(f"{m:.3f}" for m in moved[4:]))
    silent_moves[name] = (sum(moved[:4]) / 4, moved[4:])
confirm("on the signal-free group SGD does not move; Adam moves every step by over 0.3 of its mean step with signal",
        max(0.0, max(silent_moves["SGD lr 1"][1]),
            *(0.3 * silent_moves["Adam lr 0.01"][0] - m for m in silent_moves["Adam lr 0.01"][1])), 1e-12)

# %% [markdown]
# In the toy's runs this is one road to a stuck run (`research/toy/README.md`, "The stuck ReSPO runs";
# `python -m research.toy.stuck` draws them): early on most mini-batches carry no signal, and with reuse
# Adam keeps stepping on them. The committed records say how much of the weights' movement in
# the first quarter of training came in batches with no signal at all, in runs that got stuck
# and in runs that learned, and what happened when those steps were skipped
# (`--skip-silent-steps`, `research/toy/results/stuck-selection-skip/`):

# %%
stuck_records = load_records(ROOT / "research/toy/results/stuck-selection")
skip_records = load_records(ROOT / "research/toy/results/stuck-selection-skip")
silent_reading = {}
for reuse in (8, 32):
    plain = [r for r in stuck_records if (r["method"], r["lr"], r["reuse"]) == ("respo_wtilt", 0.03, reuse)
             and r["loss"] == default_kernel]
    skipped = [r for r in skip_records if r["reuse"] == reuse]
    quarter = plain[0]["iterations"] // 4
    shares = [mean_ci([coasting_share(r, quarter) for r in plain if is_stuck(r, 0.1) == stuck])[0] for stuck in (True, False)]
    silent_reading[reuse] = (shares, sum(is_stuck(r, 0.1) for r in skipped))
    print(f"respo_wtilt, lr 0.03, R = {reuse}, seeds 0-11: stuck {sum(is_stuck(r, 0.1) for r in plain)} of {len(plain)}; "
          f"weight movement in signal-free batches (first quarter): stuck runs {shares[0]:.0%}, learning runs {shares[1]:.0%}; "
          f"with no step on signal-free mini-batches: stuck {sum(is_stuck(r, 0.1) for r in skipped)} of {len(skipped)}")
confirm("at R = 8 the stuck runs moved over 3x more in signal-free batches than the learning runs; at R = 32 both under "
        "10%; skipping those steps left no stuck run at either",
        max(0.0, 3 * silent_reading[8][0][1] - silent_reading[8][0][0], max(silent_reading[32][0]) - 0.1,
            silent_reading[8][1] + silent_reading[32][1]), 1e-12)
lr_rows = [(lr, [r for r in stuck_records if (r["method"], r["lr"]) == ("respo_wtilt", lr) and r["loss"] == default_kernel])
           for lr in (0.03, 0.02, 0.01)]
print("respo_wtilt at its default kernel, R = 4, 8, 16, 32, seeds 0-11: stuck "
      + ", ".join(f"{sum(is_stuck(r, 0.1) for r in runs)} of {len(runs)} at lr {lr:g}" for lr, runs in lr_rows))

# %% [markdown]
# The demo shows the mechanism: the kernel's gradient on an all-equal group is exactly 0, SGD
# then does not move, and Adam keeps moving, by a good fraction of its steps with signal (the
# check). The records weigh it in the toy: 12 seeds per cell, run on one machine, read as
# counts (a rerun elsewhere can flip single runs, §11). At $R=8$ the stuck runs made a far larger share of their early
# movement without any signal than the learning runs; at $R=32$ both shares are small, so
# there the silent movement does not explain the stuck runs. Yet skipping those steps removed
# the stuck runs at both reuse levels (it also changes how many steps each batch gets), and
# lowering the learning rate removed them too (the last line; the check holds these readings). Neither is a change to the
# kernel: in these records, what removed stuck runs was a change to the optimizer's steps.
#
# ## 8. The temperature pitfall, numerically
#
# The sampler stores $\log\mu$ at the temperature it sampled with; the training forward must
# compute $\log\pi_\theta$ at the same temperature, or $w\neq1$ at the very first step, before
# any update. Below, $\log\mu$ recorded at $T=1$ (as `env.sample` does), the training forward
# at $T$ (logits divided by $T$, as a trainer that applies its sampling temperature does):

# %%
class AtTemperature(torch.nn.Module):
    """The policy with its logits divided by T: the training forward of a trainer that applies temperature T."""

    def __init__(self, base, temperature):
        super().__init__()
        self.base, self.temperature = base, temperature

    def forward(self, prev, feats):
        return self.base(prev, feats) / self.temperature


print("  forward  w at the first step     positives   negatives   mean phi on positives")
print("  at T     10%   50%   90%       w < 0.8     w > 1.2     seq clip / respo_wtilt")
for temperature in (1.0, 0.7, 1.3):
    first_step_view(f"{temperature:g}", batch, env.log_probs(AtTemperature(policy, temperature), batch).detach())
cold = sequence_log_weight(env.log_probs(AtTemperature(policy, 0.7), batch).detach(), batch.old_logp, batch.mask)
short = lengths <= lengths.median()
mean_token_logp = (batch.old_logp * batch.mask).sum(-1) / lengths                    # [B] mean log mu per token
likely = mean_token_logp > mean_token_logp.median()
print(f"at T = 0.7: mean |log w| {cold[short].abs().mean():.2f} over responses of at most {int(lengths.median())} "
      f"tokens, {cold[~short].abs().mean():.2f} over the longer; share with w > 1: "
      f"{(cold[likely] > 0).float().mean():.0%} of the responses made of likelier tokens (mean log mu above the "
      f"median), {(cold[~likely] > 0).float().mean():.0%} of the rest")
confirm("at T = 0.7 the longer half strays further from w = 1, and w > 1 is commoner among the likelier responses",
        max(0.0, cold[short].abs().mean().item() - cold[~short].abs().mean().item(),
            (cold[~likely] > 0).float().mean().item() - (cold[likely] > 0).float().mean().item()), 1e-12)

# %% [markdown]
# At $T=1$ in both places $w=1$ exactly. At any other training temperature every response
# starts off-policy, and the clip starts cutting positives at step 1, on a fresh batch. Each
# token adds its own $\log\pi_T-\log\pi_1$, so a longer response sums more terms; they differ in
# size and sign, and on this batch the longer half strays further from $w=1$ than the shorter
# (the last line and the check): a tendency of one batch, not a rule that $|\log w|$ grows with
# length. The error is systematic, not noise:
# $T<1$ sharpens the policy, so responses made of likely tokens get $w>1$ and the rest $w<1$
# (the last line's two shares). The fix is to scale the logits the same way on
# both sides: `nano_respo/rollout.py` records $\log\mu$ of $\mathrm{softmax}(z/T)$ as sampled,
# and its training forward `policy_logprobs` divides by the same `temperature` (one field of
# train.py's `TrainConfig`). It samples without top-k or top-p truncation. A truncated sampler draws from a
# renormalised distribution on a support that changes token by token; a training forward
# matches it only if it is handed that support, which is what DeepSeek-V3.2's **Keep Sampling
# Mask** does (arXiv:2512.02556, §3.1: the truncation mask kept from sampling and applied to
# $\pi_{old}$ and $\pi_\theta$ in training, so both compare distributions on the same tokens). This
# project has no truncation and so no mask to keep.
#
# ## 9. When the positive branch hurts, and what limits it
#
# ReSPO's positive branch at the default $\alpha_+=0$ is $\phi_+(w)=e^{-\lambda_+(w-1)}$. Below
# $w=1$ it is *above* 1: its maximum there is $e^{\lambda_+}$, reached as $w\to0$, so a positive
# the policy has drifted away from is up-weighted, not merely kept. Above $w=1$ it falls, but
# only e-fold per $1/\lambda_+$ of $w$: an over-generated positive keeps being pushed.

# %%
grid = torch.tensor([0.01, 0.5, 1.0, 2.0, 8.0])
for lam in (0.0, 0.1, 1.0):
    print(f"phi_+ at lambda_+ = {lam:g}: " + "  ".join(f"w = {w:g}: {v:.2f}" for w, v in zip(grid.tolist(), power_tilt(grid.log(), 0.0, lam).tolist())))
lone_group = int((group_reward.sum(1) == 1).nonzero()[0])
rows = torch.arange(lone_group * 8, lone_group * 8 + 8)
lone = int(rows[adv[rows] > 0])
print(f"group {lone_group} (target {batch.prompts[lone].item()}): one correct response of 8; 16 Adam steps (lr 0.01) on this group alone")
print("  w of the correct response after 1, 4, 8, 15 steps | its coefficient at those steps")
lone_run = {}
for name, method, loss in (("seq clip", "seq_clip", {}), ("respo_wtilt lambda_+ = 0", "respo_wtilt", {"wtilt_lambda_pos": 0.0}),
                           ("respo_wtilt lambda_+ = 0.1", "respo_wtilt", {}), ("respo_wtilt lambda_+ = 1", "respo_wtilt", {"wtilt_lambda_pos": 1.0})):
    run, _ = drift_run(method, advantages=adv[rows], episodes=batch[rows], loss=loss)
    lw = log_weights(run, batch[rows])[:, lone - rows[0]]                              # [steps]
    phi = [coefficients(run[s], batch[rows].old_logp, adv[rows], batch[rows].mask, StudyLossConfig(agg=AGG, method=method, **loss))[0]
           [lone - rows[0], 0].item() for s in (1, 4, 8, 15)]
    print(f"  {name:<21} " + " ".join(f"{lw[s].exp():>7.1f}" for s in (1, 4, 8, 15)) + " | "
          + " ".join(f"{v:.2f}" for v in phi))
    lone_run[name] = ([lw[s].exp().item() for s in (1, 4, 8, 15)], phi)
respo_w, respo_phi = lone_run["respo_wtilt lambda_+ = 0.1"]
confirm("at the default its coefficient is under 0.1 from step 4 on while its w keeps climbing to step 15; after 15 "
        "steps its w is highest at lambda_+ = 0 and lower the larger lambda_+",
        max(0, max(respo_phi[1:]) >= 0.1, not respo_w[1] < respo_w[2] < respo_w[3],
            not (lone_run["respo_wtilt lambda_+ = 0"][0][3] > respo_w[3] > lone_run["respo_wtilt lambda_+ = 1"][0][3])), 1e-12)

# %% [markdown]
# Drifted-away positives, where the positive branch's up-weighting acts: §6's batch sampled two batches behind the
# learner has positives at $w$ far below 1 before any step. Follow the five lowest through 16
# steps from the learner's weights (lr 0.01), and print the largest $w$ among them:

# %%
drifted_max = {}
lagged = env.sample(kept[-3], prompts, torch.Generator().manual_seed(6))                # §6's L = 2 batch
lagged_adv, _ = group_advantages(env.reward(lagged), 8)
start_lw = sequence_log_weight(env.log_probs(learner, lagged).detach(), lagged.old_logp, lagged.mask)
drifted = torch.where(lagged_adv > 0, start_lw, torch.full_like(start_lw, math.inf)).argsort()[:5]
print(f"the five lowest-w positives start at w = {start_lw[drifted].exp().min():.3f} to {start_lw[drifted].exp().max():.3f}; "
      "largest w among them after 4, 8, 15 steps:")
for name, method, loss in (("seq clip", "seq_clip", {}), ("respo_wtilt lambda_+ = 0.1", "respo_wtilt", {}),
                           ("respo_wtilt lambda_+ = 1", "respo_wtilt", {"wtilt_lambda_pos": 1.0})):
    run, _ = drift_run(method, advantages=lagged_adv, episodes=lagged, loss=loss, base=learner)
    lw = log_weights(run, lagged)[:, drifted]                                           # [steps, 5]
    print(f"  {name:<21} " + " ".join(f"{lw[s].max().exp():>5.2f}" for s in (4, 8, 15)))
    drifted_max[name] = lw[[4, 8, 15]].max(1).values.exp()
confirm("the drifted-away positives rise past w = 1.2 under the clip too, which gives them 0 there, and further under "
        "respo_wtilt (lambda_+ = 0.1) at every step shown", max(0.0, 1.2 - drifted_max["seq clip"].max().item(),
        (drifted_max["seq clip"] - drifted_max["respo_wtilt lambda_+ = 0.1"]).max().item()), 1e-12)

# %% [markdown]
# Below $w=1$ the positive branch is mild at the default: at most $e^{\lambda_+}$ (the first printed
# lines). Only a large $\lambda_+$ makes it a real up-weighting of what $\mu$ once sampled (a
# change of target, not a variance cut). What the printouts show hurting is the other side,
# the slow brake *above* $w=1$, in two ways:
#
# - the drifted-away positives do not stop at $w=1$: they rise past it under every method,
#   under the clip too, whose coefficient on them is 0 above $1+\epsilon$, so there what carries them
#   is the rest of the batch's updates (and Adam's momentum). They rise further under ReSPO than
#   under the clip (the check). ReSPO keeps a positive coefficient on them above the band,
#   $e^{-\lambda_+(w-1)}$, but it also differs from the clip on every other response of the batch,
#   and this cell does not separate their own push from the rest: whether their own push is why
#   they rise further is a conjecture here;
# - a lone correct response, which the first step already makes over-generated, is pushed on
#   and on: the clip gives it 0 above its band (its $w$ then moves only through the other
#   responses' updates and Adam's momentum). Under ReSPO at the default its own coefficient
#   falls to about 0 within a few steps while its $w$ keeps climbing (the printout and the
#   check): from then on what moves it is, again, the other responses' updates and Adam's
#   momentum, not its own term. It climbs furthest at $\lambda_+=0$ (coefficient 1 at every $w$,
#   no brake), less far the larger $\lambda_+$. Whether this push made the toy's stuck runs stuck
#   is a conjecture here: `research/toy/README.md` reports the lone correct response's weight rising far
#   above 1 within its batch in those runs, with the sampled entropy collapsing, but no cell of this notebook
#   separates the kernel's share from the optimizer's (§7 found that the learning rate, not a
#   kernel setting, removed them).
#
# What limits it: the tilt $\lambda_+$ (the lone group's rows: a larger $\lambda_+$ brakes sooner
# above 1 but raises what a drifted positive gets below 1, up to $e^{\lambda_+}$: one knob sets
# both; the default $0.1$ is the toy selection's choice, `research/toy/README.md`); and the learning
# rate, which in the toy's records removed the stuck runs where none of §10's negative branches
# did (§7, §10). Not the gradient-norm clip: it bounds
# SGD's step, but Adam's step is about lr per weight whatever the gradient's norm (§2).
#
# ## 10. Which negative branch collapsed under heavy reuse
#
# The toy's selection runs (seeds 0–2) and the stuck-run study (seeds 0–11) tried ReSPO with
# four negative branches $(\alpha_-,\lambda_-)$ at lr 0.03, the positive branch fixed at $(0, 0.1)$.
# Each branch's shape (from the kernel), then its runs (from the committed records):

# %%
dense = torch.linspace(-6.0, 4.0, 20001)                                               # log w from 0.0025 to 55
selection = load_records(ROOT / "research/toy/results/selection")
branch_reading = {}
print("  (alpha_-, lambda_-)  peak of phi_-: at w, height | selection, seeds 0-2: stuck at R = 4, R = 16 | largest phi on a "
      "negative (run mean) at R = 4 | seeds 0-11, R = 4/8/16/32: stuck")
for alpha_neg, lambda_neg in ((3.0, 2.0), (2.0, 2.0), (3.0, 1.0), (1.0, 0.0)):
    knobs = {"wtilt_alpha_pos": 0.0, "wtilt_lambda_pos": 0.1, "wtilt_alpha_neg": alpha_neg, "wtilt_lambda_neg": lambda_neg}
    phi = power_tilt(dense, alpha_neg, lambda_neg)
    shape = "unbounded (phi_- = w)" if lambda_neg == 0 else f"{dense[phi.argmax()].exp():.2f}, {phi.max():.2f}"
    cell = {reuse: [r for r in selection if (r["method"], r["lr"], r["reuse"]) == ("respo_wtilt", 0.03, reuse) and r["loss"] == knobs]
            for reuse in (4, 16)}
    study = [[r for r in stuck_records if (r["method"], r["lr"], r["reuse"]) == ("respo_wtilt", 0.03, reuse) and r["loss"] == knobs]
             for reuse in (4, 8, 16, 32)]
    studied = (" / ".join(f"{sum(is_stuck(r, 0.1) for r in runs)}" for runs in study)
               + f" (all: {sum(is_stuck(r, 0.1) for runs in study for r in runs)} of {sum(map(len, study))})"
               if all(study) else "not run")
    print(f"  ({alpha_neg:g}, {lambda_neg:g}){'':<14}{shape:<22}| "
          + ", ".join(f"{sum(is_stuck(r, 0.1) for r in cell[reuse])} of {len(cell[reuse])}" for reuse in (4, 16))
          + f" | {mean_ci([r['phi_max_neg'] for r in cell[4]])[0]:.2f} | {studied}")
    branch_reading[alpha_neg, lambda_neg] = {
        "stuck16": sum(is_stuck(r, 0.1) for r in cell[16]), "runs16": len(cell[16]),
        "phi4": mean_ci([r["phi_max_neg"] for r in cell[4]])[0],
        "peak": math.inf if lambda_neg == 0 else phi.max().item(),
        "stuck_study": [sum(is_stuck(r, 0.1) for r in runs) for runs in study] if all(study) else None,
        "stuck_seeds16": sorted(r["seed"] for r in cell[16] if is_stuck(r, 0.1))}
tilted = [b for b, v in branch_reading.items() if v["stuck_study"]]
untilted_16 = branch_reading[1.0, 0.0]["stuck16"]
print(f"selection records at R = 16: (1, 0) stuck on {untilted_16} of {branch_reading[1.0, 0.0]['runs16']}; the tilted "
      f"branches on at most {max(v['stuck16'] for b, v in branch_reading.items() if b != (1.0, 0.0))} of 3 each; "
      f"the default (3, 2)'s stuck seeds there: {branch_reading[3.0, 2.0]['stuck_seeds16']}")
confirm("the default's one stuck run at R = 16 is seed 0, the run §11 reruns beside its record",
        float(branch_reading[3.0, 2.0]["stuck_seeds16"] != [0]), 1e-12)
confirm("in the selection records at R = 16 the untilted (1, 0) is stuck on more seeds than any tilted branch, each of "
        "which is stuck on at most one; its negatives got the largest phi at R = 4",
        max(0, *(v["stuck16"] > 1 or v["stuck16"] >= untilted_16 for b, v in branch_reading.items() if b != (1.0, 0.0)),
            max(v["phi4"] for v in branch_reading.values()) > branch_reading[1.0, 0.0]["phi4"]), 1e-12)
confirm("of the tilted branches the highest peak has the fewest stuck runs over the 12 seeds, (2, 2) the most, and at "
        "R = 32 (2, 2) has fewer than the default (3, 2)",
        max(0, max(tilted, key=lambda b: branch_reading[b]["peak"]) != min(tilted, key=lambda b: sum(branch_reading[b]["stuck_study"])),
            max(tilted, key=lambda b: sum(branch_reading[b]["stuck_study"])) != (2.0, 2.0),
            branch_reading[2.0, 2.0]["stuck_study"][3] >= branch_reading[3.0, 2.0]["stuck_study"][3]), 1e-12)

# %% [markdown]
# Read it with the branch shapes. The untilted branch $(1,0)$ is plain importance sampling on
# negatives: $\phi_-=w$ grows without bound, so a wrong response the policy over-generates is
# pushed down the harder the more it is over-generated (§5's other half, unchecked), and its
# runs gave negatives the largest coefficients at $R=4$. At $R=16$ the selection records have it
# stuck on more of its seeds than any tilted branch, each of which is stuck on at most one of
# three (the counts printed; the first check holds them). That is a difference of one run in
# three, and single runs flip: the default's one stuck run there is the seed printed, the run
# §11 reruns beside its record (the check). The three tilted branches are bounded (their peak height
# printed), and the records do not order them on collapse by that bound: the branch with the
# highest peak has the fewest stuck runs over the 12 seeds. The most are the $\alpha_-=\lambda_-$
# branch $(2,2)$'s, whose peak sits at $w=1$ (of the three it fades slowest below 1, the
# weakest soft trust region on the negatives there), but
# they come mostly at light reuse, and at $R=32$ it has fewer than the default: the
# prototype's report that "$\alpha_-=\lambda_-$ collapses under *heavy* reuse" (unrecorded here,
# docs/math.md §3) is not what these records show (the second check), and the totals differ by
# a few runs of 48. Three seeds per selection cell: the $(1,0)$ reading is a small sample; the
# stuck-run study never ran it.
#
# ## 11. Exercises: predict, then run
#
# **Exercise 1.** Before reading any record: at the toy's largest learning rate (0.03) and
# $R=16$, which methods collapse, i.e. are stuck (final training reward below 0.1) on *every*
# one of the selection seeds 0–2? Write your set, run the check (it reads
# `research/toy/results/selection/runs.jsonl`), then run two of them yourself below.

# %%
my_collapse = set()  # your prediction: a set of names from `methods`
checks.check_collapse_prediction(my_collapse, ROOT / "research/toy/results/selection")

# %% [markdown]
# Then run: seed 0 for two methods (`toy.train`, the same code that wrote the records), against
# the committed record of the same run. Change the methods and the seed to test the rest of
# your prediction (each line says how many rollout batches a run has). On another CPU a
# rerun can part from the record after some batches (`research/toy/README.md` explains why); the last
# line per method says whether this one did. Where it does, every reading of §4 and §10 that rests
# on that run moves with it.

# %%
for method in ("seq_clip", "respo_wtilt"):
    job = Job(env="seq", method=method, reuse=16, seed=0, lr=0.03, loss=default_kernel if method == "respo_wtilt" else {})
    mine = train(job)
    committed = next(r for r in selection if (r["method"], r["reuse"], r["lr"], r["seed"]) == (method, 16, 0.03, 0)
                     and r["loss"] == job.loss)
    for name, record in (("rerun", mine), ("committed", committed)):
        print(f"{method:>9} {name:>9}: {len(record['reward_curve'])} rollout batches, reward every 5th "
              + " ".join(f"{v:.2f}" for v in record["reward_curve"][4::5]) + f" | final {record['final_reward']:.2f}")
    verdicts = ["stuck" if is_stuck(record, 0.1) else "learns" for record in (mine, committed)]
    print(f"{'':>9} the rerun {verdicts[0]}, the record {verdicts[1]}: "
          + ("they agree" if verdicts[0] == verdicts[1] else "they part, on the CPU this ran on"))

# %% [markdown]
# **Exercise 2.** §2's clip run starved many of the batch's positives after one Adam step at
# lr 0.01. Predict how many of them sit below $w=0.8$ after one step at lr 0.003 (same batch,
# same clip), then run the cell: the check takes one step itself and grades your number
# (within a small tolerance).

# %%
my_starved = None  # your prediction: a whole number of positives
one_step, _ = drift_run("seq_clip", steps=2, lr=0.003)
checks.check_starved_prediction(my_starved, log_weights(one_step)[1], positive)

# %% [markdown]
# ## 12. Quick questions
#
# 1. Each group has many more wrong responses than right ones. Why does that not, by itself,
#    make the update push the negatives harder than it pulls the positives?
#    <details><summary>Answer</summary>Group-centred advantages sum to zero in every group: the
#    negatives' total |A| is exactly the positives' total (§2's printout), however the group splits.</details>
# 2. Why can the first, on-policy step of a fresh batch already leave positives below $w=0.8$,
#    with Adam but not with SGD at a small step? And which positives fall?
#    <details><summary>Answer</summary>Some fall at all because of interference: to first order
#    positive $j$'s $\log\pi$ changes by $\langle\nabla\log\pi_j,\Delta\theta\rangle$, which for a step along the
#    positives' gradient is $\eta\sum_iA_i\langle\nabla\log\pi_j,\nabla\log\pi_i\rangle$, negative for the positives whose
#    gradient points against the batch's, even with only positives pushed (§2's first-order count,
#    which a tiny real step confirms). Enough to cross 0.8 in one step because Adam's first step is
#    ±lr on every weight whatever the gradient's size, many times SGD's at lr 1, which lowers
#    nearly the same ones (the gradient's first-order set and its sign's share most of their
#    members, §2's first count) by too little (§2's controls). Which ones: for a short Adam step exactly those its
#    direction lowers at first order; at the learning rates these runs use the step is beyond the
#    linear regime, and on some batches many of the positives that end below 0.8 are ones first
#    order would raise (§2's learning-rate table). Over several steps SGD starves them too when
#    every negative is pushed at $\phi=1$, the ones below 0.8 too (§2's last controls).</details>
# 3. A batch where every response to every prompt is wrong: what gradient does any kernel give,
#    and how can the weights still move?
#    <details><summary>Answer</summary>Every advantage is 0, so every method's gradient is exactly
#    0; Adam still steps on its momentum, by a good fraction of a step with signal (§7). In the
#    toy, skipping those steps or a smaller learning rate removed the stuck runs.</details>
# 4. The sampler stores $\log\mu$ at $T=1$ and the trainer computes $\log\pi$ with logits divided
#    by $T=0.7$. What is $w$ before the first update, and which responses get $w>1$?
#    <details><summary>Answer</summary>Not 1: each token contributes $\log\pi_{0.7}-\log\pi_1$,
#    so $w$ moves away from 1 with length; sharpening raises the likely tokens, so responses made
#    of them get $w>1$, the rest $w<1$, and the clip cuts from step 1 (§8).</details>
# 5. Why does raising $\lambda_+$ both help and hurt?
#    <details><summary>Answer</summary>$\phi_+=e^{-\lambda_+(w-1)}$: above $w=1$ a larger
#    $\lambda_+$ brakes an over-generated positive sooner; below $w=1$ it raises what a drifted-away
#    positive gets, up to
#    $e^{\lambda_+}$, so drifted-away positives are up-weighted more (§9).</details>
#
# ## Where this comes from
#
# - The reuse loop and the group advantage (§1): GRPO (Shao et al., arXiv:2402.03300) on PPO's
#   epochs × mini-batches (Schulman et al., arXiv:1707.06347).
# - Interference at first order through shared parameters (§2): the first-order expansion of a
#   gradient step, measured here per response; Adam's per-weight step (Kingma and Ba, ICLR 2015).
# - The clips and coefficients compared (§3, §5): PPO/GRPO, GSPO (arXiv:2507.18071), CISPO
#   (arXiv:2506.13585), VESPO (arXiv:2602.10693), TOPR (arXiv:2503.14286); the retained-signal
#   statistic by length and the `no_is`/`is` references are this course's.
# - Staleness (§6): asynchronous actors that lag the learner, as IMPALA's (Espeholt et al., ICML
#   2018); in LLM RL, docs/bibliography.md's decoupled PPO and rollout corrections (core notebook 05_off_policy_in_production, `research/notebooks/three_sources`).
# - The temperature pitfall and the truncation mask (§8): DeepSeek-V3.2's Keep Sampling Mask
#   (arXiv:2512.02556, §3.1).
# - The negative branch's shape (§10): VESPO's $(3,2)$.
#
# One line per work: [docs/bibliography.md](../../docs/bibliography.md).

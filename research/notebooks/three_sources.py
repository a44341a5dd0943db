# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Deeper · Three sources of off-policy data: mismatch, staleness, reuse
#
# The measurements and record readings behind core notebook 05 ([05_off_policy_in_production](../../notebooks/05_off_policy_in_production.ipynb)).
# The committed study's ReSPO runs are this project's reconstruction, `respo_wtilt` (its records
# name it); the live cells (§1-§2) run the published kernel, `respo`, whose coefficient enters only
# the reuse steps of §1's second cell, not the mismatch or the router. Core notebooks
# 01_reuse_makes_data_off_policy to 04_starvation_watched had one source of off-policy data: reuse,
# several optimizer steps on one rollout batch. A real RL system has two more. Its inference
# engine (vLLM) samples in bfloat16 while the learner trains in float32, so the sampler is a slightly different policy
# even before any update: the **train-inference mismatch** (on a mixture-of-experts model
# the two engines' routers can even pick other experts). And asynchronous systems sample with
# weights some updates old: **staleness**. Here the three are made on a CPU, named, measured
# one at a time and together, and the corrections TRL and verl offer for them, token- and
# sequence-level, are read on the same drifted responses as ReSPO.
#
# **Three policies.** $\mu$ is the policy that sampled the batch (the engine's weights, in
# its precision, maybe stale); $\pi_{old}$ is the trust region's anchor, decoupled PPO's proximal
# policy; $\pi$ is the learner during the updates on the batch. Here (and in this repository's
# `--correction`) $\pi_{old}$ is the learner's log-prob of the batch *recomputed at the start of the
# updates on it*, one no-grad forward of the current learner. The libraries choose by trainer and
# mode (read at TRL commit f2cd577 and in verl's `docs/algo/rollout_corr_math.md` §2.1-2.2):
#
# - TRL's `GRPOTrainer._generate_and_score_completions` computes `old_per_token_logps` with the
#   training model under `no_grad` after generation and *before* the rewards are scored, and only
#   when `gradient_accumulation_steps` is not a multiple of `steps_per_generation * num_iterations`
#   or vLLM importance sampling is on; otherwise the loss takes `per_token_logps.detach()`, so
#   $\pi_{old}=\pi$ at every step. TRL's experimental `AsyncGRPOTrainer` takes the generator's own
#   log-probs as `old_log_probs` (`async_rollout_worker.py`, `async_grpo_trainer.py`): there
#   $\pi_{old}=\mu$, in exactly the asynchronous case.
# - verl's decoupled mode recomputes `old_log_probs` with `actor.compute_log_prob` before the
#   batch's update epochs (`RayPPOTrainer._compute_old_log_prob`; "computed at start of training
#   epoch"); its bypass mode sets $\pi_{old}=\mu$ and skips that forward.
#
# So where a recomputed $\pi_{old}$ exists, it is *not* "the learner's weights when the batch was
# sampled": in an asynchronous system those are $\mu$'s own weights. `--lag k` counts *iterations*
# (`TrainConfig.lag`, `offpolicy.LaggedPolicy`), and each iteration takes $R$ optimizer updates on its
# batch, so $\mu$'s weights are $kR$ updates older than $\pi_{old}$'s (once $k$ iterations have passed: the
# lag grows $0, 1, \dots, k$ before). On a timeline of optimizer updates, with $\pi_{old}$ recomputed:

# %%
from course import draw_policy_timeline

draw_policy_timeline(lag=2, reuse=3, iteration=3)

# %% [markdown]
# So $\rho=\pi_{old}/\mu$ carries the mismatch (different precision, the same weights at lag 0)
# *and* the staleness (the $kR$ updates between the sampler's weights and the learner's), and
# $\pi/\pi_{old}$ carries the reuse. For every response,
#
# $$w = \frac{\pi}{\mu} = \underbrace{\frac{\pi}{\pi_{old}}}_{\text{reuse}} \cdot
#   \underbrace{\frac{\pi_{old}}{\mu}}_{\text{mismatch, staleness}} = w_{trust}\,\rho .$$
#
# ReSPO puts its kernel on the whole $w$ (the *coupled* form). TRL's and verl's rollout
# corrections split it (the *decoupled* form, after Hilton et al.'s decoupled PPO, which writes the
# correction per action; docs/math.md §7): GRPO's token clip on $\pi/\pi_{old}$ (its zero cells are
# the trust region, on each token's ratio; docs/math.md §2), times a correction weight $c$ of $\pi_{old}/\mu$, truncated or masked, per token ($c(\rho_t)$) or per
# sequence ($c(\rho)$, $\rho=\prod_t\rho_t$). Both libraries offer both granularities (§4).

# %%
import math

import matplotlib.pyplot as plt
import numpy as np
import torch
from IPython.display import Markdown, display

from course import confirm, load_quietly
from nano_respo.kernel import LossConfig, sequence_log_weight
from nano_respo.offpolicy import LaggedPolicy, OffPolicy, learner_logprobs, router_choices, router_mismatch
from nano_respo.rollout import policy_logprobs
from train import TrainConfig, collect_rollouts, rl_iteration

torch.set_num_threads(1)
plt.rcParams.update({"figure.dpi": 100, "font.size": 10, "axes.grid": True, "grid.alpha": 0.3})
from research import figures  # noqa: E402  (the committed records, read back)



# %% [markdown]
# ## 1. The mismatch, live: $w \ne 1$ before any update
#
# The dense tiny Qwen3 after its warm start (the one that ships with the package). `LaggedPolicy` with lag 0 and
# `dtype=bfloat16` is what `train.py --sampler-dtype bfloat16` builds: a copy of the learner
# cast to bfloat16 samples the batch and records $\log\mu$; the learner's own float32
# forward on the same tokens gives $\log\pi_{old}$. No optimizer step has happened, so
# $\pi = \pi_{old}$, and with an fp32 sampler every $w$ would be 1 up to float noise (`nano_respo/rollout.py`).
# The cell's last lines are the control: the same rollout drawn by an fp32 copy. The bf16 weight
# cast stands in for an inference engine's numerics: a real engine (vLLM, SGLang) also differs in
# its kernels, batching and reduction order, which a cast does not reproduce. The config's learning
# rate, 3e-4, is the committed study's stress rate, not `train.py`'s default (1e-4); it matters only
# from the reuse steps of the next cell on.

# %%
cfg = TrainConfig(model="tiny-qwen3", loss=LossConfig(), prompts_per_iteration=16, reuse=4, epochs=2,
                  lr=3e-4, seed=0, sampler_dtype="bfloat16")
task, model, tokenizer = load_quietly(cfg)
sampler = LaggedPolicy(model, lag=0, dtype=torch.bfloat16).sampler_for(model)
samples, rewards, _ = collect_rollouts(sampler, tokenizer, task, cfg, iteration=0)
from nano_respo.rollout import RolloutBatch  # noqa: E402

batch = RolloutBatch(samples.input_ids, samples.attention_mask, samples.completion_mask, samples.old_logp,
                     rewards, torch.zeros_like(rewards))
pi_old = learner_logprobs(model, batch, cfg)                                   # [N, C] float32 learner
mask, mu = batch.completion_mask, batch.old_logp
log_rho = sequence_log_weight(pi_old, mu, mask)                                # [N] log pi_old / mu per response
lengths = mask.sum(-1)
print(f"{len(log_rho)} responses sampled by the bf16 copy; at step 0, w != 1 for {int((log_rho != 0).sum())} of them")
print(f"log w at step 0: 10% / 50% / 90% quantiles "
      + " / ".join(f"{q:+.4f}" for q in torch.quantile(log_rho, torch.tensor([0.1, 0.5, 0.9])).tolist())
      + f"; the largest |log w| is {log_rho.abs().max():.3f}")
d = torch.where(mask, pi_old - mu, torch.zeros_like(mu))
print(f"KL(mu || pi_old) per token (k3, as `sampler_kl` logs it): {(torch.expm1(d) - d)[mask].mean():.2e}")
short, long_ = lengths <= lengths.median(), lengths > lengths.median()
print(f"mean |log w|: {log_rho[short].abs().mean():.4f} on the shorter half, {log_rho[long_].abs().mean():.4f} "
      f"on the longer half (log w sums one rounding difference per token)")
halves = {"shorter": short, "longer": long_}
token_d = {name: d.abs()[mask & rows[:, None]] for name, rows in halves.items()}       # each half's |d_t|
per_token = {name: values.mean().item() for name, values in token_d.items()}
sqrt_rule = (lengths[long_].float().mean() / lengths[short].float().mean()).sqrt().item()
ratio = (log_rho[long_].abs().mean() / log_rho[short].abs().mean()).item()
print(f"mean length {lengths[short].float().mean():.1f} and {lengths[long_].float().mean():.1f} tokens; the longer half's "
      f"mean |log w| is {ratio:.1f}x the shorter's; sqrt of the length ratio is {sqrt_rule:.1f}x")
larger = max(per_token, key=per_token.get)
print(f"per token (shorter, longer): mean |d_t| {per_token['shorter']:.2e} and {per_token['longer']:.2e}, the {larger} "
      f"half's {max(per_token.values()) / min(per_token.values()):.1f}x the other's; the largest |d_t| "
      + " and ".join(f"{values.max():.3f}" for values in token_d.values()))
# Added after reading the line above (the shorter half's mean came out larger): is the gap in the typical
# token (the median) or in the few largest?
print(f"per token, read after the means (shorter, longer): median |d_t| "
      + " and ".join(f"{values.median():.2e}" for values in token_d.values()) + "; the largest |d_t| is "
      + " and ".join(f"{values.max() / values.sum():.0%}" for values in token_d.values()) + " of its half's sum of |d_t|")
top = log_rho.abs().argmax()
in_half = "longer" if long_[top] else "shorter"
rest = torch.ones_like(long_)
rest[top] = False
print(f"the largest |log w| ({log_rho[top].abs():.3f}, {int(lengths[top])} tokens) is in the {in_half} half, "
      f"{log_rho[top].abs() / log_rho[halves[in_half]].abs().sum():.0%} of that half's sum of |log w|; without it the "
      f"ratio is {(log_rho[long_ & rest].abs().mean() / log_rho[short & rest].abs().mean()).item():.1f}x")
# Control: independent, zero-mean errors of each half's own per-token sizes. Each half's d_t are shuffled
# across its responses and given random signs; the responses keep their lengths.
gen = torch.Generator().manual_seed(0)
shuffled = []
for _ in range(200):
    mean_abs = {}
    for name, rows in halves.items():
        values = d[mask & rows[:, None]]
        values = values[torch.randperm(len(values), generator=gen)] * (torch.randint(0, 2, values.shape, generator=gen) * 2 - 1)
        mean_abs[name] = torch.stack([c.sum() for c in values.split(lengths[rows].tolist())]).abs().mean()
    shuffled.append((mean_abs["longer"] / mean_abs["shorter"]).item())
q10, q50, q90 = torch.quantile(torch.tensor(shuffled), torch.tensor([0.1, 0.5, 0.9])).tolist()
print(f"control, each half's d_t shuffled with random signs (200 draws): ratio 10/50/90% {q10:.1f} / {q50:.1f} / {q90:.1f}x")
confirm("the longer half's mean |log w| exceeds the shorter half's", max(0.0, (log_rho[short].abs().mean()
        - log_rho[long_].abs().mean()).item()), 1e-12)
confirm("independent zero-mean errors of each half's own sizes reach the observed ratio (control's 90% >= it)",
        max(0.0, ratio - q90), 1e-12)
fp32_sampler = LaggedPolicy(model, lag=0).sampler_for(model)
with torch.random.fork_rng():  # the cells below sample as they would without this control
    fp32_samples, fp32_rewards, _ = collect_rollouts(fp32_sampler, tokenizer, task, cfg, iteration=0)
fp32_batch = RolloutBatch(fp32_samples.input_ids, fp32_samples.attention_mask, fp32_samples.completion_mask,
                          fp32_samples.old_logp, fp32_rewards, torch.zeros_like(fp32_rewards))
fp32_log_rho = sequence_log_weight(learner_logprobs(model, fp32_batch, cfg), fp32_batch.old_logp,
                                   fp32_batch.completion_mask)
print(f"control, an fp32 copy samples instead: the largest |log w| at step 0 is {fp32_log_rho.abs().max():.1e} "
      f"(the bf16 copy's: {log_rho.abs().max():.3f})")
confirm("the fp32 sampler's |log w| at step 0 is float noise, far below the bf16 sampler's (under 1%)",
        max(0.0, fp32_log_rho.abs().max().item() - 0.01 * log_rho.abs().max().item()), 1e-12)

# %% [markdown]
# Now the product identity on real numbers: four reuse steps on a bf16-sampled batch (what
# `train.py --sampler-dtype bfloat16 --reuse 4` does on one iteration), then each response's
# $\log w$ against its two factors.

# %%
lagged = LaggedPolicy(model, lag=0, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
batch, records, _ = rl_iteration(model, tokenizer, task, optimizer, cfg, iteration=0, step=0,
                                 off_policy=OffPolicy(lagged))
with torch.no_grad():
    pi_now, _, _ = policy_logprobs(model, batch, cfg.temperature)              # [N, C] after 4 steps
mask, mu = batch.completion_mask, batch.old_logp
log_w = sequence_log_weight(pi_now, mu, mask)
log_trust = sequence_log_weight(pi_now, batch.pi_old_logp, mask)              # log pi / pi_old: reuse
log_rho = sequence_log_weight(batch.pi_old_logp, mu, mask)                    # log pi_old / mu: mismatch
print(f"max |log w - (log pi/pi_old + log pi_old/mu)| = {(log_w - log_trust - log_rho).abs().max():.1e}")
rows = ["| response | length | log pi_old/mu | log pi/pi_old | log w |", "|---|---|---|---|---|"]
for i in log_w.abs().argsort(descending=True)[:4].tolist():
    rows.append(f"| {i} | {int(mask[i].sum())} | {log_rho[i]:+.3f} | {log_trust[i]:+.3f} | {log_w[i]:+.3f} |")
display(Markdown("\n".join(rows)))
print(f"spread (std) of log pi_old/mu {log_rho.std():.4f}, of log pi/pi_old {log_trust.std():.4f}")

# %% [markdown]
# ## 2. The MoE's router mismatch
#
# The tiny Qwen3-MoE (8 experts, top-2 per token) after its warm start. The bf16 copy and
# the fp32 learner compute slightly different router logits; where two experts' logits are
# close, the top-2 choice flips. `router_mismatch` runs both models over the same batch and
# counts the response tokens at which some layer picks other experts. That is what two
# published fixes remove by making the training forward use the sampler's experts: verl's
# rollout routing replay (`actor.router_replay.mode: R3` with `rollout.enable_rollout_routing_replay:
# True`; `verl/utils/megatron/router_replay_patch.py`; Ma et al., arXiv:2510.11370) records the
# routing of every sampled token in the inference engine and replays it in training, and
# DeepSeek-V3.2's **Keep Routing** (arXiv:2512.02556, §3.1) preserves the expert routing paths used
# during sampling and enforces them during training. This project measures the mismatch and
# does not replay routing.

# %%
moe_cfg = TrainConfig(model="tiny-qwen3-moe", loss=LossConfig(), prompts_per_iteration=8, reuse=1, epochs=1,
                      seed=0, sampler_dtype="bfloat16")
moe_task, moe, moe_tokenizer = load_quietly(moe_cfg)
moe_sampler = LaggedPolicy(moe, lag=0, dtype=torch.bfloat16).sampler_for(moe)
samples, rewards, _ = collect_rollouts(moe_sampler, moe_tokenizer, moe_task, moe_cfg, iteration=0)
moe_batch = RolloutBatch(samples.input_ids, samples.attention_mask, samples.completion_mask, samples.old_logp,
                         rewards, torch.zeros_like(rewards))
share = router_mismatch(moe_sampler, moe, moe_batch)
per_layer = (router_choices(moe_sampler, moe_batch) != router_choices(moe, moe_batch)).any(-1)  # [L, N, C]
print(f"{int(moe_batch.completion_mask.sum())} response tokens; some layer routes differently at {share:.2%} of them")
for layer, differs in enumerate(per_layer):
    print(f"  layer {layer}: {differs[moe_batch.completion_mask].float().mean():.2%}")

# %% [markdown]
# ## 3. The study: each source alone, then all three
#
# `research/offpolicy.py` (pre-registered in `research/OFFPOLICY.md`) ran short ReSPO
# runs, 8 rollout batches of 16 prompts × 8 at lr 3e-4, three seeds, on both CPU settings,
# for four sources: **mismatch** (bf16 sampler, one step per batch), **reuse** (fp32 sampler,
# 8 steps per batch), **staleness** (fp32 sampler, one step per batch, rollouts 4 iterations
# old) and **all** (the three at once). At every optimizer step it kept what the loss saw.
# Everything below is read from the committed records.

# %%
SOURCES = figures.OFFPOLICY_SOURCES
COLOURS = dict(zip(SOURCES, ("tab:purple", "tab:blue", "tab:orange", "tab:red")))
MODELS = [m for m in figures.OFFPOLICY_MODELS if any(figures.offpolicy_runs(m, s) for s in SOURCES)]
print(f"{figures.value('offpolicy_records')} records; models read: {', '.join(figures.OFFPOLICY_MODELS[m] for m in MODELS)}")
for m in MODELS:
    print(f"  {m}: respo_wtilt runs per source " + ", ".join(f"{s} {len(figures.offpolicy_runs(m, s))}" for s in SOURCES))
for s in SOURCES:  # --lag counts iterations of R updates each: mu's weights are lag x R updates old once the lag is full
    (sampler, reuse, lag), = {(r["sampler_dtype"], r["reuse"], r["lag"]) for r in figures.offpolicy_runs(MODELS[0], s)}
    print(f"  {s:9}  sampler {sampler}, R = {reuse} updates per batch, --lag {lag} iterations: mu is "
          f"{lag * reuse} optimizer updates behind pi_old")

# %%
edges = np.linspace(-1, 1, 41)  # research/offpolicy.py's HIST_EDGES: bins of 0.05, the tails in the end bins
fig, axes = plt.subplots(1, len(MODELS), figsize=(5.5 * len(MODELS), 3.6), squeeze=False)
for ax, m in zip(axes[0], MODELS):
    for s in SOURCES:
        runs = figures.offpolicy_runs(m, s)
        if runs:
            counts = np.sum([r["reading"]["log_w_hist"] for r in runs], axis=0)
            ax.stairs(counts / counts.sum(), edges, color=COLOURS[s], lw=1.8, label=s)
    ax.axvline(math.log(0.8), color="k", ls=":", lw=1)
    ax.set(yscale="log", xlabel="log w (the end bins hold everything beyond ±1)", ylabel="share of responses",
           title=f"{figures.OFFPOLICY_MODELS[m]}: log w at the loss, all seeds")
    ax.legend(fontsize=9)
fig.tight_layout()
plt.show()

# %%
CENTRE = np.abs((edges[:-1] + edges[1:]) / 2) < 0.05   # the two bins around 0: |log w| < 0.05
for m in MODELS:
    print(f"{figures.OFFPOLICY_MODELS[m]}: share of responses in the two bins around 0 | in the left end bin (log w < -0.95)")
    shares, left = {}, {}
    for s in SOURCES:
        hists = [np.array(r["reading"]["log_w_hist"], dtype=float) for r in figures.offpolicy_runs(m, s)]
        shares[s] = [h[CENTRE].sum() / h.sum() for h in hists]
        pooled = np.sum(hists, axis=0) / np.sum(hists)
        left[s] = pooled[0]
        print(f"  {s:9}  {pooled[CENTRE].sum():.2f} (runs {min(shares[s]):.2f}-{max(shares[s]):.2f})"
              f" | {pooled[0]:.3f}")
    confirm(f"{figures.OFFPOLICY_MODELS[m]}: every mismatch run keeps more of its responses in the two central bins "
            "than any run of reuse, staleness or all", max(0.0, max(max(shares[s]) for s in SOURCES[1:])
                                                           - min(shares["mismatch"])), 1e-12)
    q = max(max(abs(r["reading"]["log_w_quantiles"][i]) for i in (1, 3)) for r in figures.offpolicy_runs(m, "mismatch"))
    confirm(f"{figures.OFFPOLICY_MODELS[m]}: every mismatch run's 10-90% range of log w lies inside the two bins "
            f"(largest |quantile| {q:.3f} < 0.05)", max(0.0, q - 0.05), 1e-12)
    confirm(f"{figures.OFFPOLICY_MODELS[m]}: reuse, staleness and all each put a larger share at the left end than "
            "mismatch", max(0.0, left["mismatch"] - min(left[s] for s in SOURCES[1:])), 1e-12)

# %% [markdown]
# The dotted line is $w = 0.8$, where a sequence clip starts to starve a positive. The curves
# differ already near 0: the two bins around 0 hold most of the mismatch's responses (every
# run's whole 10-90% range of $\log w$ fits inside them, the second check) but a much smaller
# share under reuse, staleness and all (printed above, the first check). They differ again in the
# left end bin ($\log w<-0.95$, everything beyond $-1$ included), the responses the learner now gives
# far less probability than their sampler did: few for the bf16 sampler alone, a larger share for
# each drifted source (the third check). The pre-registered readings, computed from the records:

# %%
for m in MODELS:
    print(f"{figures.OFFPOLICY_MODELS[m]}")
    for s in SOURCES:
        name = f"offpolicy_{m}_{s}"
        print(f"  {s:9}  log w 10% {figures.value(name + '_logw_q10'):>16}   90% {figures.value(name + '_logw_q90'):>16}"
              f"   ESS {figures.value(name + '_ess'):>9}   positives below 0.8 {figures.value(name + '_low_w_share'):>11}")
    print(f"  P1 (mismatch alone is small, below reuse): {figures.value(f'offpolicy_{m}_p1')}")

# %%
fig, axes = plt.subplots(1, len(MODELS), figsize=(5.5 * len(MODELS), 3.4), squeeze=False)
for ax, m in zip(axes[0], MODELS):
    x = np.arange(len(SOURCES))
    for offset, (key, label, colour) in enumerate((("len_low_w_pos", "positives w < 0.8", "tab:red"),
                                                    ("len_high_w_pos", "positives w > 1.2", "tab:green"),
                                                    ("len_pos", "all positives", "0.5"))):
        means = [np.mean(figures.offpolicy_values(m, s, figures.reading(key)) or [np.nan]) for s in SOURCES]
        bars = ax.bar(x + (offset - 1) * 0.27, np.nan_to_num(means), 0.27, color=colour, label=label)
        ax.bar_label(bars, labels=["none" if np.isnan(v) else f"{v:.0f}" for v in means], fontsize=8)
    ax.set(xticks=x, xticklabels=SOURCES, ylabel="mean length (tokens)", ylim=(0, ax.get_ylim()[1] * 1.3),
           title=f"{figures.OFFPOLICY_MODELS[m]}: who is in the tails")
    ax.legend(fontsize=8, loc="upper left", ncol=3)
fig.tight_layout()
plt.show()
for m in MODELS:
    print(f"{figures.OFFPOLICY_MODELS[m]}, P3 (low-w positives' length against the high-w positives'): "
          + "; ".join(f"{s} {figures.value(f'offpolicy_{m}_{s}_p3')}" for s in SOURCES))

# %% [markdown]
# Bars are means over seeds and settings ("none": no such positive in any run). The control
# matters: $\log w$ sums one log-ratio per token, so a symmetric random drift sends long responses into
# *both* tails. The low-$w$ positives are "the long ones" only where they are longer than the
# high-$w$ positives, and the line above says where every seed agrees.
#
# Which factor carries each source, and the MoE's router:

# %%
for m in MODELS:
    print(f"{figures.OFFPOLICY_MODELS[m]}")
    for s in SOURCES:
        runs = figures.offpolicy_runs(m, s)
        if not runs:
            continue
        rho = max(max(abs(q) for q in r["reading"]["log_rho_quantiles"][1:4]) for r in runs)
        trust = max(max(abs(q) for q in r["reading"]["log_trust_quantiles"][1:4]) for r in runs)
        print(f"  {s:9}  largest |10-90% quantile|: log pi_old/mu {rho:.3f}, log pi/pi_old {trust:.3f};"
              f"  sampler KL {figures.value(f'offpolicy_{m}_{s}_sampler_kl')}"
              f";  router mismatch {figures.value(f'offpolicy_{m}_{s}_router')}")
    if m == "moe":
        print(f"  P5 (all three sources route differently more often than the bf16 sampler alone): "
              f"{figures.value('offpolicy_moe_p5')}")

# %% [markdown]
# ## 4. What each correction gives the drifted responses
#
# On the very responses ReSPO's runs trained on, every arm's coefficient (the mean per-token
# weight of a response, at our aggregation). The arms: ReSPO, the sequence clip, GRPO's token
# clip and GSPO, all four *coupled* (on $\pi/\mu$ itself: GRPO's token ratio is $\pi_t/\mu_t$, which on a
# drifted response moves off 1 token by token, and the clip drops a positive's tokens above $1+\epsilon$,
# so GRPO gives the starved positives a little under 1, not 1: printed below, and the third check);
# GRPO with a **sequence-level** masked correction ($c=\rho$ where $\rho\le3$, else 0:
# TRL's `vllm_importance_sampling_mode="sequence_mask"`, its default, with
# `vllm_importance_sampling_clip_max=3`); GRPO with a **token-level** truncated correction
# ($c_t=\min(\rho_t,2)$: verl's `rollout_is: token` with `rollout_is_threshold: 2`, and TRL's
# `token_truncate` with its own cap); GRPO with DeepSeek-V3.2's off-policy sequence mask
# ($\delta=0.5$, negatives only; TRL's `off_policy_mask_threshold`).
#
# **Granularity is the variable, not the vendor.** Both libraries offer both levels. TRL's
# `vllm_importance_sampling_mode` takes `token_truncate`, `token_mask`, `sequence_truncate` or
# `sequence_mask` (`trl/trainer/grpo_config.py`; the field's default is `sequence_mask`); the weight is
# computed in `GRPOTrainer._generate_and_score_completions` and multiplied into the per-token loss in
# `GRPOTrainer._compute_loss`. verl's `algorithm.rollout_correction.rollout_is`
# takes `token` or `sequence` (`verl/trainer/ppo/rollout_corr_helper.py`,
# `compute_rollout_correction_weights`); its `RolloutCorrectionConfig` dataclass defaults to
# `sequence` with `rollout_is_threshold=2.0`, while the shipped
# `verl/trainer/config/algorithm/rollout_correction.yaml` sets `rollout_is: null` (off), and this
# repository's `examples/verl_respo.sh` sets `sequence`. The two levels do different things:
#
# - **sequence-level** multiplies by $\rho=\prod_t\pi_{old,t}/\mu_t$. For a reward given once, at the end
#   of the response, that product is the exact, unbiased behaviour-to-proximal weight of the whole
#   response: trajectory-level importance sampling (with only a terminal reward, Precup et al.'s
#   per-decision weight is the whole product too). verl 0.9.1 says so of this mode ("Per-sequence IS weights
#   (unbiased, high variance)", `verl/trainer/config/algorithm.py`; "product of tokens; unbiased, high
#   variance", `rollout_corr_helper.compute_rollout_correction_weights`), and VESPO's recipe of its
#   product weight ("TRUE sequence IS ratio … UNBIASED"). Decoupled PPO itself (Hilton et al.) writes the
#   correction per action, $\pi_{prox}(a_t|s_t)/\pi_{behav}(a_t|s_t)$ (verl's `rollout_corr_math.md` §2.3:
#   per token, $\rho_t$). Truncating $\rho$ is the kind of variance cut ACER and V-trace make on per-step
#   ratios, here on the product; masking it (dropping the response outside the bounds) is MIS's
#   rejection, which ACER and V-trace never do;
# - **token-level** multiplies each token by its own $\rho_t$, which stays near 1 even where the
#   product has fallen far: the product itself is neither weighted nor bounded, and a bias wherever
#   the tokens' ratios compound.
#
# VESPO's recipe is left out of the figure: it aggregates by token-mean, so its recorded value
# is its coefficient times an aggregation factor common to every response of a batch (our
# padded length over the batch's mean length), not a coefficient; it is printed separately
# below. For the positives below $w=0.8$:

# %%
ARMS = [a for a in figures.OFFPOLICY_ARMS if a != "vespo_token_mean"]   # a coefficient times an aggregation factor
SHORT = {"respo_wtilt": "respo_wtilt", "seq_clip": "seq clip", "grpo": "GRPO", "gspo": "GSPO",
         "grpo_trl_seq_mask": "GRPO\n+sequence\nmasked IS", "grpo_verl_token_trunc": "GRPO\n+token\ntruncated IS",
         "grpo_opsm": "GRPO\n+off-policy\nmask"}
drifted = [s for s in SOURCES if any(figures.offpolicy_values(m, s, figures.arm_reading("respo_wtilt")) for m in MODELS)]
fig, axes = plt.subplots(1, len(MODELS), figsize=(6.5 * len(MODELS), 4), squeeze=False)
for ax, m in zip(axes[0], MODELS):
    x = np.arange(len(ARMS))
    shown = [s for s in drifted if s != "mismatch"][:3]
    for offset, s in enumerate(shown):
        means = [np.mean(figures.offpolicy_values(m, s, figures.arm_reading(a)) or [np.nan]) for a in ARMS]
        bars = ax.bar(x + (offset - (len(shown) - 1) / 2) * 0.26, np.nan_to_num(means), 0.26, color=COLOURS[s],
                      label=s)
        ax.bar_label(bars, labels=["0" if v == 0 else "" for v in means], fontsize=8)
    ax.axhline(1, color="k", lw=0.8)
    ax.axhline(0.8, color="k", ls=":", lw=1)
    ax.set(xticks=x, ylabel="coefficient of a positive, w < 0.8",
           title=f"{figures.OFFPOLICY_MODELS[m]}: what each arm gives the starved positives")
    ax.set_xticklabels([SHORT[a] for a in ARMS], fontsize=8)
    ax.legend(fontsize=8)
fig.tight_layout()
plt.show()
for m in MODELS:
    for s in drifted:
        print(f"{figures.OFFPOLICY_MODELS[m]}, {s}: " + ", ".join(
            f"{a} {figures.value(f'offpolicy_{m}_{s}_phi_low_{a}')}" for a in ARMS)
              + f" | vespo_token_mean (times the token-mean factor, not a coefficient) "
                f"{figures.value(f'offpolicy_{m}_{s}_phi_low_vespo_token_mean')}")


def arm_mean(m, s, arm):
    return float(np.mean(figures.offpolicy_values(m, s, figures.arm_reading(arm))))


for m in MODELS:
    confirm(f"{figures.OFFPOLICY_MODELS[m]}, staleness: the sequence-level masked correction gives the starved positives "
            "what the sequence clip gives them (to 0.01), the token-level truncation what GRPO gives (to 0.01)",
            max(abs(arm_mean(m, "staleness", "grpo_trl_seq_mask") - arm_mean(m, "staleness", "seq_clip")),
                abs(arm_mean(m, "staleness", "grpo_verl_token_trunc") - arm_mean(m, "staleness", "grpo"))), 0.01)
    confirm(f"{figures.OFFPOLICY_MODELS[m]}, reuse: rho = 1, so both corrections are GRPO itself",
            max(abs(arm_mean(m, "reuse", a) - arm_mean(m, "reuse", "grpo")) for a in ("grpo_trl_seq_mask",
                                                                                     "grpo_verl_token_trunc")), 0.005)
    confirm(f"{figures.OFFPOLICY_MODELS[m]}: the coupled GRPO gives the starved positives less than 1 in every source",
            max(0.0, max(max(figures.offpolicy_values(m, s, figures.arm_reading("grpo"))) for s in drifted) - 1), 1e-12)

# %% [markdown]
# Solid line: 1, what every method gives on-policy; dotted: 0.8. Read it by the factor that
# moved. Under **reuse** only $\pi/\pi_{old}$ moved and $\rho=1$ (exactly, in these records: with no
# separate sampler the reader takes $\pi_{old}=\mu$; a recomputed $\pi_{old}$ would differ from $\mu$ by
# float noise, §1's control), so both corrections are GRPO itself (the second check); the sequence
# clip gives the starved positive its own small $w$, ReSPO slightly above 1. Under **staleness** the
# low weight sits in $\rho$ (§3's factor table): the sequence-level masked correction multiplies by
# that small $\rho$ and so gives what the sequence clip gives, and the token-level truncation
# multiplies each token by its own $\rho_t$, which stays near 1 even where their product is small, and
# so gives what the coupled GRPO gives, whose token ratios at $R=1$ are those same $\rho_t$ (the first
# check).
#
# Read what that small value is. At $R=1$ under staleness, $\pi=\pi_{old}$ and the sequence-level
# coefficient is $\rho=\pi_{old}/\mu=w$: the *exact* importance weight of the whole response, the
# unbiased correction for a reward given at its end. What this notebook counts as "starving a
# stale positive" is, at sequence level,
# importance sampling doing its job: a response the learner has moved away from is, correctly,
# a rare response under the learner. The reconstruction's value (printed as respo_wtilt, slightly above 1) is not a less biased estimate
# of the same gradient; it is notebooks/deeper/derivation_details §1's change of target, a weighted likelihood of the
# successes $\mu$ found, whatever the learner now thinks of them. The token-level truncation keeps
# a value near 1 for a third reason: it never sees the product. The off-policy mask touches
# negatives only, so it is GRPO on positives.
#
# ## 5. The reward after the short runs
#
# ReSPO (the reconstruction, `respo_wtilt`) trained in every source; GRPO with TRL's correction trained where all three sources
# act, for the comparison. Mean rollout reward over the 8 batches, ranges over seeds and both
# settings, and the pre-registered verdict (a difference only where every seed agrees):

# %%
for m in MODELS:
    for s in SOURCES:
        name = f"offpolicy_{m}_{s}"
        line = f"{figures.OFFPOLICY_MODELS[m]}, {s}: respo_wtilt {figures.value(name + '_reward_respo_wtilt')}"
        if figures.offpolicy_runs(m, s, "grpo_trl_seq_mask"):
            line += (f", grpo_trl_seq_mask {figures.value(name + '_reward_grpo_trl_seq_mask')}; respo_wtilt "
                     f"{figures.value(name + '_reward_verdict')}")
        print(line)

# %% [markdown]
# Eight batches from a warm start that already answers most prompts leave little room, and
# three seeds cannot tell two methods apart unless every seed agrees. The corrections' effect
# is on the *weights* (sections 3-4), which any single batch shows; whether it pays in
# reward needs longer runs and more seeds.
#
# ## Quick questions
#
# 1. With an fp32 sampler and no lag, which factor of $w$ is 1 at every step, and why
#    is the first step on a batch then on-policy?
#    <details><summary>answer</summary>$\rho=\pi_{old}/\mu=1$ up to float noise (§1's fp32 control prints its size): the sampler is the learner at rollout time. At the first step $\pi=\pi_{old}$ too, so $w=1$ to the same noise; only later steps move $\pi/\pi_{old}$. In §3's records $\rho$ is exactly 1 there only because the reader sets $\pi_{old}=\mu$ when no separate sampler exists.</details>
# 2. Why is the mismatch's $|\log w|$ larger on long responses (§1)?
#    <details><summary>answer</summary>$\log w=\sum_t d_t$, $d_t=\log\pi_{old,t}-\log\mu_t$, adds one rounding difference per token, so a longer response sums more of them: on this batch the longer half's mean $|\log w|$ exceeds the shorter half's (the first check), 1.3x, below $\sqrt{}$ of the length ratio (1.5x). The per-token differences are not larger on the longer half here: the shorter half's mean $|d_t|$ is 1.6x the longer half's, and the shorter half holds the largest $|d_t|$ (0.387, against 0.171). Read after seeing those means (the second per-token line was added then): the two halves' median $|d_t|$ are nearly equal (1.73e-04 and 1.76e-04), and the shorter half's largest $|d_t|$ alone is 34% of its half's sum (the longer half's, 11%), so the gap between the means is in the tail, not in the typical token. The single largest $|\log w|$ (0.377, 27 tokens) is in the shorter half, 46% of that half's sum of $|\log w|$; without that one response the ratio is 2.3x. The control shuffles each half's own $d_t$ across its responses with random signs, which makes them independent and zero-mean; its 10-90% range, 1.1x to 1.4x, holds the observed 1.3x, and its 90% reaches it (the second check): nothing printed needs the errors to be dependent or biased. The $\sqrt{|y|}$ rule assumes one light-tailed error size on both halves, which this batch does not have: the largest $|d_t|$ sit far above the medians, and the two halves' means differ. Whether a token's rounding difference depends on the response's length is not shown here: on one batch, the per-token means differ by 1.6x in favour of the shorter half, and the difference is in the tail.</details>
# 3. Under staleness alone, the sequence-level masked correction and the sequence clip give a starved positive about the same coefficient. Why, and is it starvation?
#    <details><summary>answer</summary>At $R=1$, $\pi=\pi_{old}$, so GRPO's clipped coefficient on $\pi/\pi_{old}$ is 1 and the correction gives $\rho=\pi_{old}/\mu=w$ (kept while $\rho\le3$); the sequence clip gives $w$ too. That value is the exact importance weight, the unbiased correction, not an artefact; ReSPO's positive branch gives about $e^{\lambda_+(1-w)}\ge1$, a change of target (notebooks/deeper/derivation_details §1).</details>
# 4. ReSPO in verl: which flag would apply the mismatch correction twice, and which would hide it?
#    <details><summary>answer</summary>Twice: the kernel's own `policy_loss.correction` on top of verl's `rollout_correction` (the adapter refuses it). Hidden: `rollout_correction.rollout_is=null`, which leaves $w=\pi/\pi_{old}$. `examples/verl_respo.sh` sets `rollout_is=sequence` with a matching `policy_loss.rollout_is_level`, and keeps `bypass_mode=false`, because bypass mode replaces the loss with verl's own. verl hands over $\min(\rho, C)$ with $C$ its `rollout_is_threshold` (and $\log\rho$ clamped to $\pm20$), so the folded $w$ is $\pi/\mu$ only while $\rho\le C$.</details>
# 5. Why does the off-policy sequence mask never change what a positive receives?
#    <details><summary>answer</summary>It drops only responses with $A<0$ whose mean per-token $\log(\mu/\pi)$ exceeds $\delta$: over-generated *negatives*. Positives keep GRPO's coefficient whatever their weight.</details>
#
# ## Where this comes from
#
# - Three policies, a clip on $\pi/\pi_{old}$ and a per-action correction on $\pi_{old}/\mu$: decoupled PPO
#   (Hilton, Cobbe and Schulman, arXiv:2110.00641), as verl's rollout correction implements it
#   (`verl/trainer/ppo/rollout_corr_helper.py`, `docs/algo/rollout_corr_math.md`) and TRL's GRPO does
#   with vLLM (the weight computed in `GRPOTrainer._generate_and_score_completions`, applied in
#   `_compute_loss`). The sequence product as the exact, unbiased weight for a terminal reward is
#   trajectory-level importance sampling (Precup, Sutton and Singh, ICML 2000), as verl's
#   `rollout_is: sequence` docstrings and VESPO's recipe say; decoupled PPO corrects per action.
# - Truncated token-level correction (TIS: Yao et al., fengyao.notion.site/off-policy-rl), the
#   per-step truncation of ACER (Wang et al., ICLR 2017) and V-trace (Espeholt et al., ICML 2018);
#   sequence-level masked correction (MIS: Liu, Li et al., richardli.xyz/rl-collapse), a rejection
#   those two never make.
# - The off-policy sequence mask, Keep Routing and Keep Sampling Mask: DeepSeek-V3.2
#   (arXiv:2512.02556, §3.1); TRL's `get_off_policy_mask` implements the first.
# - Rollout routing replay: Ma et al. (arXiv:2510.11370), verl's `router_replay.mode: R3`.
# - VESPO's recipe and its token-mean aggregation: Shen et al. (arXiv:2602.10693),
#   `recipe/vespo/code/core_algos.py` in github.com/FloyedShen/VESPO.
#
# One line per work: [docs/bibliography.md](../../docs/bibliography.md).

# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 · Off-policy in production
#
# **The question.** Core 01-04 had one source of off-policy data, reuse. Where else does a real
# RL system's data come from a policy other than the learner, and what do TRL, verl or one's own
# loop set about it?
#
# **The answer.** Two more sources. The inference engine computes in other numerics than the
# learner (here, as in `train.py --sampler-dtype bfloat16`, a bf16 cast of the learner's weights
# stands in for an engine's numerics), so $w\ne1$ before any update, and on a mixture-of-experts
# model its router picks other experts for some tokens: the **mismatch**. An asynchronous system
# samples with weights some updates old: **staleness**. A recomputed $\pi_{old}$ splits $w$ into a
# reuse factor and a mismatch-and-staleness factor; the libraries correct the second per token or
# per sequence, ReSPO puts its kernel on the whole $w$. A wrong sampling temperature in the
# training forward is one more source, and a pure bug.
#
# ## 1. Three policies on one timeline
#
# $\mu$ sampled the batch (the engine's weights, in its numerics, maybe stale); $\pi_{old}$ is the
# learner's log-prob of the batch recomputed before the updates on it (one no-grad forward: this
# repository's `--correction`, verl's decoupled mode); $\pi$ is the learner during the updates.
# `--lag k` counts iterations of $R$ updates, so $\mu$'s weights are $kR$ updates older than $\pi_{old}$'s.

# %%
import math

import matplotlib.pyplot as plt
import torch

from course import confirm, draw_policy_timeline, load_quietly
from nano_respo.kernel import LossConfig, sequence_log_weight
from nano_respo.offpolicy import LaggedPolicy, OffPolicy, learner_logprobs, router_mismatch
from nano_respo.rollout import RolloutBatch, policy_logprobs
from train import TrainConfig, collect_rollouts, rl_iteration

torch.set_num_threads(1)
plt.rcParams.update({"figure.dpi": 100, "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})
ON_THIS_MACHINE = "(bf16 numerics: the digits below depend on the CPU kernels that ran them; the checks hold on both settings)"

draw_policy_timeline(lag=2, reuse=3, iteration=3)

# %% [markdown]
# For every response
# $$w=\frac{\pi}{\mu}=\underbrace{\frac{\pi}{\pi_{old}}}_{\text{reuse}}\cdot\underbrace{\frac{\pi_{old}}{\mu}}_{\text{mismatch, staleness}}=w_{trust}\,\rho .$$
# ReSPO's kernel acts on the whole $w$ (the *coupled* form). The rollout corrections of TRL and verl
# split it (the *decoupled* form, after Hilton et al.'s decoupled PPO; docs/math.md §7): a trust
# region on $\pi/\pi_{old}$ times a correction weight of $\rho$, truncated or masked, per token
# ($\rho_t$) or per sequence ($\rho=\prod_t\rho_t$).
#
# ## 2. The mismatch, live: $w\ne1$ before any update
#
# The dense tiny Qwen3 after its shipped warm start. A copy of the learner cast to bfloat16 samples a
# batch and records $\log\mu$; the float32 learner's forward on the same tokens gives $\log\pi_{old}$. No
# update has happened, so $\pi=\pi_{old}$. The cast is this project's stand-in for an inference engine:
# a real engine (vLLM, SGLang) also differs in its kernels, batching and reduction order, which a weight
# cast does not reproduce. The control: the same rollout drawn by an fp32 copy.

# %%

def sampled_batch(sampler, tokenizer, task, cfg):
    """One rollout batch drawn by `sampler`, log mu recorded as it sampled (no advantages needed here)."""
    samples, rewards, _ = collect_rollouts(sampler, tokenizer, task, cfg, iteration=0)
    return RolloutBatch(samples.input_ids, samples.attention_mask, samples.completion_mask, samples.old_logp,
                        rewards, torch.zeros_like(rewards))


cfg = TrainConfig(model="tiny-qwen3", prompts_per_iteration=16, reuse=4, epochs=2, seed=0, sampler_dtype="bfloat16")
task, model, tokenizer = load_quietly(cfg)
with torch.random.fork_rng():
    bf16_batch = sampled_batch(LaggedPolicy(model, lag=0, dtype=torch.bfloat16).sampler_for(model), tokenizer, task, cfg)
with torch.random.fork_rng():
    fp32_batch = sampled_batch(LaggedPolicy(model, lag=0).sampler_for(model), tokenizer, task, cfg)
log_rho = {name: sequence_log_weight(learner_logprobs(model, b, cfg), b.old_logp, b.completion_mask)
           for name, b in (("bf16", bf16_batch), ("fp32", fp32_batch))}
print(ON_THIS_MACHINE)
print(f"{len(log_rho['bf16'])} responses per batch; largest |log w| at step 0: bf16 sampler {log_rho['bf16'].abs().max():.3f}, "
      f"fp32 sampler below 1e-4 (float noise, its digits depend on the machine)")
confirm("the fp32 sampler's largest |log w| at step 0 is below 1e-4", max(0.0, log_rho["fp32"].abs().max().item() - 1e-4), 1e-12)
print("bf16 sampler, log w at step 0, 10% / 50% / 90%: "
      + " / ".join(f"{q:+.4f}" for q in torch.quantile(log_rho["bf16"], torch.tensor([0.1, 0.5, 0.9])).tolist()))
confirm("the fp32 sampler's |log w| at step 0 is float noise, under 1% of the bf16 sampler's largest",
        max(0.0, log_rho["fp32"].abs().max().item() - 0.01 * log_rho["bf16"].abs().max().item()), 1e-12)
outside = int((log_rho["bf16"].abs() > math.log(1.2)).sum())
print(f"bf16 sampler: {outside} of {len(log_rho['bf16'])} responses outside the clip band [0.8, 1.2] at step 0")
confirm("on this batch the bf16 sampler's 10-90% range of log w lies within +-0.01 at step 0",
        max(0.0, torch.quantile(log_rho["bf16"], torch.tensor([0.1, 0.9])).abs().max().item() - 0.01), 1e-12)

# %% [markdown]
# On this batch the mismatch is small for most responses (the last check), but
# not for all: the printed few leave the clip band before any update, and a clip treats them as
# drifted. The fp32 control shows the cast is the cause (the first check). Why longer responses stray further (one rounding difference per token,
# summed) and the committed study's runs of each source alone and together are
# `research/notebooks/three_sources` §1 and §3 (the reconstruction's records, `respo_wtilt`).
#
# ## 3. The MoE's router
#
# On the tiny Qwen3-MoE (8 experts, top-2 per token) the bf16 copy and the fp32 learner compute
# slightly different router logits; where two experts' logits are close, the top-2 choice flips, and
# the learner trains a token through other experts than the one that wrote it.

# %%
moe_cfg = TrainConfig(model="tiny-qwen3-moe", prompts_per_iteration=8, reuse=1, epochs=1, seed=0, sampler_dtype="bfloat16")
moe_task, moe, moe_tokenizer = load_quietly(moe_cfg)
moe_sampler = LaggedPolicy(moe, lag=0, dtype=torch.bfloat16).sampler_for(moe)
moe_batch = sampled_batch(moe_sampler, moe_tokenizer, moe_task, moe_cfg)
share = router_mismatch(moe_sampler, moe, moe_batch)
print(ON_THIS_MACHINE)
print(f"{int(moe_batch.completion_mask.sum())} response tokens; some layer routes differently at {share:.2%} of them")
confirm("on this batch the bf16 copy routes some response tokens differently from the fp32 learner", float(share == 0), 1e-12)

# %% [markdown]
# Two published fixes make the training forward use the sampler's experts: verl's rollout routing
# replay (`actor.router_replay.mode: R3` with `rollout.enable_rollout_routing_replay: True`; Ma et al.,
# arXiv:2510.11370) and DeepSeek-V3.2's Keep Routing (arXiv:2512.02556, §3.1). This project measures
# the mismatch and does not replay routing.
#
# ## 4. Staleness, and the split of $w$
#
# `train.py --lag k` samples with the weights the learner had $k$ iterations earlier. Its first update
# on a batch already sees $w\ne1$; `research/notebooks/starvation_controls` §6 shows it on the toy (a lagged batch
# starts with positives already below the band). Here one iteration of `train.py --sampler-dtype
# bfloat16 --reuse 4 --epochs 2` at `train.py`'s default learning rate (printed; the committed
# study's runs used a stress rate of 3e-4), and each response's $\log w$ against its two factors:

# %%
optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
batch, _, _ = rl_iteration(model, tokenizer, task, optimizer, cfg, iteration=0, step=0,
                           off_policy=OffPolicy(LaggedPolicy(model, lag=0, dtype=torch.bfloat16)))
with torch.no_grad():
    pi_now, _, _ = policy_logprobs(model, batch, cfg.temperature)
mask = batch.completion_mask
log_w = sequence_log_weight(pi_now, batch.old_logp, mask)
log_trust = sequence_log_weight(pi_now, batch.pi_old_logp, mask)               # reuse: pi / pi_old
log_rho_seq = sequence_log_weight(batch.pi_old_logp, batch.old_logp, mask)     # mismatch: pi_old / mu
token_log_rho = (batch.pi_old_logp - batch.old_logp)[mask]
print(ON_THIS_MACHINE)
print(f"lr {cfg.lr:g}, {cfg.reuse} updates; spread (std) of log pi/pi_old {log_trust.std():.4f}, of log pi_old/mu "
      f"{log_rho_seq.std():.4f}; per token, the largest |log rho_t| {token_log_rho.abs().max():.3f}, per sequence "
      f"the largest |log rho| {log_rho_seq.abs().max():.3f}")
confirm("log w = log(pi/pi_old) + log(pi_old/mu) for every response", (log_w - log_trust - log_rho_seq).abs().max(), 1e-5)
fig, ax = plt.subplots(figsize=(5, 3))
ax.scatter(log_rho_seq, log_trust, s=8, alpha=0.6)
ax.set(xlabel="log π_old/μ (mismatch)", ylabel="log π/π_old (reuse)", title="each response's two factors, one iteration")
fig.tight_layout()
plt.show()

# %% [markdown]
# The split is exact (the check). A sequence-level correction multiplies by the product $\rho$, which
# for a reward given once at the end is the unbiased weight of the whole response, with a variance
# that grows with length; a token-level one multiplies each token by its own $\rho_t$: nothing bounds
# the product, and a bias where the tokens' ratios compound. On this batch one token carries
# most of the largest product (the printed maxima); the mismatch factor is small beside the reuse
# factor after four updates (the spreads). What each correction then gives the drifted responses of the committed
# runs is `research/notebooks/three_sources` §4.
#
# ## 5. The temperature pitfall
#
# The sampler records $\log\mu$ at the temperature it sampled with; the training forward must compute
# $\log\pi$ at the same one, or every response starts off-policy. On the fp32-sampled batch of §2:

# %%
off_band = {}
for temperature in (cfg.temperature, 0.7):
    with torch.no_grad():
        forward, _, _ = policy_logprobs(model, fp32_batch, temperature)
    log_w_t = sequence_log_weight(forward, fp32_batch.old_logp, fp32_batch.completion_mask)
    off_band[temperature] = (log_w_t.abs() > math.log(1.2)).float().mean().item()
    print(f"training forward at T = {temperature:g} (sampled at {cfg.temperature:g}): share of responses outside "
          f"[0.8, 1.2] {off_band[temperature]:.0%}")
confirm("a training forward at T = 0.7 puts more of this batch outside the band than one at the sampling temperature",
        max(0.0, off_band[cfg.temperature] - off_band[0.7]), 1e-12)

# %% [markdown]
# This learner has taken §4's updates, so even at the right temperature some responses are off the
# band; at $T=0.7$ many more are (the check), before a single update on this batch. The fix is one field:
# `nano_respo/rollout.py` divides the logits by the same `temperature` on both sides. A top-k or
# top-p sampler draws from a truncated support that the training forward must be handed
# (DeepSeek-V3.2's Keep Sampling Mask); this project samples without truncation.
# `research/notebooks/starvation_controls` §8 measures the pitfall on the toy.
#
# > **What to set**
# > - **Your own loop** (this repository): `python train.py --sampler-dtype bfloat16` runs ReSPO on $w=\pi/\mu$, all sources in one weight; `--method grpo --correction sequence-mask` is TRL's default vLLM correction, `--correction token-truncate` verl's truncated IS, `--opsm-delta 0.5` DeepSeek-V3.2's sequence mask (docs/training.md). Record $\log\mu$ at the sampling temperature and compute $\log\pi$ at the same one.
# > - **Which $W$ the kernel reads**: this repository's default is the coupled $w=\pi/\mu$ (`--weight-against sampler`): staleness and the engine's numerics enter the kernel itself. The authors' runs put it on $\pi/\pi_{old}$, the learner recomputed at the start of the batch's updates (`--weight-against pi_old`, which `--protocol paper` sets), the sampler entering only through a correction folded into $\log W$ (off in their launchers). With no lag and an fp32 sampler the two are the same weight (`tests/step/test_weight_against.py`).
# > - **TRL**: `vllm_importance_sampling_mode` takes `token_truncate`, `token_mask`, `sequence_truncate` or `sequence_mask` (the default), with `vllm_importance_sampling_clip_max` (3 in `research/notebooks/three_sources` §4's arm); `off_policy_mask_threshold` is DeepSeek-V3.2's mask.
# > - **verl**: `algorithm.rollout_correction.rollout_is` takes `token` or `sequence`, with `rollout_is_threshold`; the shipped `rollout_correction.yaml` sets it off (`null`), this repository's `examples/verl_respo.sh` sets `sequence`. On an MoE, routing replay (`actor.router_replay.mode: R3`).

# %% [markdown]
# ## 6. What the evidence decided
#
# This project's test of the paper's claim is the drift study (research/README.md, pre-registered in
# `research/DRIFT.md`): on `digit_conflict` with the tiny Qwen3, reuse as the paper's (four one-epoch
# mini-batches) with a sampler 4 iterations stale, every method at one learning rate, 24 paired seeds on
# each of two CPU settings. It first checks that the mechanism is present on its own sequence-clip runs,
# then compares methods on early reward. The cell reads its verdicts from the committed records.

# %%
import json
from pathlib import Path

# What research/figures.py reads from the committed records (python -m research.figures --check holds this file).
value = json.loads(Path("../research/figures.json").read_text()).__getitem__

print(f"manipulation check: {value('drift_check')}; {value('drift_check_share')} of the positives below w = 0.8, "
      f"the sequence clip keeping {value('drift_check_clip_keeps')} of all positives' signal per length bin")
for claim, name in (("M  starvation under the sequence clip costs early reward", "drift_M"),
                    ("R  ReSPO learns from the drifted positives", "drift_R"),
                    ("U  ReSPO beats GRPO, GSPO and VESPO", "drift_U")):
    print(f"{claim:58} {value(name)}")
print(f"ReSPO - VESPO, early reward ({value('drift_C6_reads')}):")
for setting in value("drift_C6_by_setting").split("; "):
    print("  " + setting)
print("post hoc, deciding nothing: respo_pos_clip_neg - respo, early reward:")
for setting in value("drift_post_hoc_P1").split("; "):
    print("  " + setting)
print(f"the paper's own design (reuse ratio alone, research/REUSE.md), its check on grpo's runs:\n"
      f"  default: {value('reuse_check_default')}\n  unvectorised: {value('reuse_check_unvectorised')}")

# %% [markdown]
# On this small task the starvation is real and costs learning, and ReSPO recovers the lost signal and beats
# GRPO and GSPO early. It does not beat VESPO: on the default kernels it is significantly *below* it. Its early
# gain over the clip is on the short family, not the long one the paper's mechanism names. Post hoc (chosen
# after the records, deciding nothing), the published kernel is the weakest ReSPO run here: swapping its
# negative branch for the clip's helps on both settings. The paper's own design, drift from the reuse ratio
# alone, stopped at its check: post hoc, reuse made the deep tail grow from $N=8$ to 16 but not further to 32, far smaller
# than the paper's 22.8 % at $N=32$, so it compared no method. Whether any of this holds for long reasoning
# on real models, the paper's claim, these runs neither confirm nor refute.

# %% [markdown]
# > **What to remember**
# > - Three sources make $w\ne1$: reuse, the engine's numerics (and on an MoE its router), staleness; a recomputed $\pi_{old}$ splits $w=w_{trust}\,\rho$ exactly.
# > - A correction of $\rho$ is per token (near 1, biased where ratios compound) or per sequence (the product: unbiased for a final reward, higher variance); this repository's ReSPO puts its kernel on the whole $w=\pi/\mu$ by default, the authors' code on $\pi/\pi_{old}$ (`--weight-against pi_old`).
# > - Sample and train at one temperature: a mismatch there puts every response off-policy before the first update.
#
# ## Quick questions
#
# 1. At lag 0 with an fp32 sampler, what is $w$ at the first update on a batch?
#    <details><summary>answer</summary>1 up to float noise (§2's control): $\mu$ and $\pi$ are the same weights in the same numerics.</details>
# 2. Which factor of $w=w_{trust}\,\rho$ does `--lag 2` move, and which does `--reuse 8`?
#    <details><summary>answer</summary>The lag moves $\rho=\pi_{old}/\mu$ ($\mu$'s weights are $2R$ updates old); reuse moves $w_{trust}=\pi/\pi_{old}$ (§1, §4).</details>
# 3. Why can a token-level correction leave a response whose product $\rho$ is far from 1 almost unweighted?
#    <details><summary>answer</summary>Each $\rho_t$ stays near 1 while their product compounds; the token-level weight never sees the product (§4).</details>
#
# ## Sources
#
# Decoupled PPO (Hilton et al., arXiv:2110.00641); TRL's `GRPOTrainer` and `grpo_config.py`, verl's
# `rollout_corr_helper.py` and `docs/algo/rollout_corr_math.md`, as read in `research/notebooks/three_sources`;
# routing replay (Ma et al., arXiv:2510.11370); DeepSeek-V3.2's Keep Routing and Keep Sampling Mask
# (arXiv:2512.02556, §3.1); ReSPO (arXiv:2609.35433). docs/bibliography.md lists them.

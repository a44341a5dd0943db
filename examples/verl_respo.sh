#!/usr/bin/env bash
# ReSPO in verl 0.9.1: GRPO on GSM8K with loss_mode=respo, on one node of $GPUS GPUs.
# Needs a GPU machine with verl's full install (pip install "verl[vllm]==0.9.1"), GSM8K as
# parquet (verl's examples/data_preprocess/gsm8k.py writes it) and nano_respo importable in
# every Ray worker: this script puts the repository on PYTHONPATH; on several nodes install
# the repository on each. Rollout reuse as the paper's (arXiv:2609.35433): N = 8 mini-batches
# of 32 prompts x 8 responses, one epoch (each response used once, the k-th mini-batch k - 1
# updates stale), token-mean, lr 1e-6, no KL; ReSPO's constants are LossConfig's defaults.
# Extra Hydra overrides pass through: bash examples/verl_respo.sh trainer.total_epochs=1
#
# The three policies (docs/math.md §7): mu is vLLM's (its log-prob of each sampled token,
# rollout.calculate_log_probs -> rollout_log_probs), pi_old the actor's recomputed log-probs
# before the update (verl's old_log_probs), pi the actor now. ReSPO's weight must be
# w = pi / mu, with each correction applied once:
# - algorithm.rollout_correction.rollout_is=sequence: verl computes rho = pi_old / mu per
#   response and hands over min(rho, rollout_is_threshold), its log clamped to +-20 first
#   (rollout_corr_helper.compute_rollout_correction_weights); the adapter folds that weight into
#   log w once, so w = (pi / pi_old) * min(rho, 2): w = pi / mu while rho <= 2.
#   policy_loss.rollout_is_level must equal rollout_is (the adapter refuses token weights under
#   "sequence").
# - rollout_is=null instead would leave w = pi / pi_old: the mismatch and staleness unseen.
# - bypass_mode=false: verl's bypass mode replaces loss_mode by its own loss, so ReSPO's
#   kernel would not run.
# - policy_loss.correction stays none (the kernel's own decoupled correction): the adapter
#   refuses it under verl's, which would otherwise weigh pi_old / mu twice.
# tests/integrations/test_examples.py checks these flags against the adapter.
set -euo pipefail
DATA=${DATA:-$HOME/data/gsm8k}
MODEL=${MODEL:-Qwen/Qwen3-0.6B}
GPUS=${GPUS:-8}
export PYTHONPATH="$(cd "$(dirname "$0")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"

python3 -m verl.trainer.main_ppo \
  algorithm.adv_estimator=grpo \
  algorithm.use_kl_in_reward=false \
  data.train_files="$DATA/train.parquet" \
  data.val_files="$DATA/test.parquet" \
  data.train_batch_size=256 \
  data.max_prompt_length=512 \
  data.max_response_length=1024 \
  actor_rollout_ref.model.path="$MODEL" \
  actor_rollout_ref.rollout.name=vllm \
  actor_rollout_ref.rollout.n=8 \
  actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
  actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16 \
  actor_rollout_ref.rollout.calculate_log_probs=true \
  algorithm.rollout_correction.rollout_is=sequence \
  algorithm.rollout_correction.rollout_is_threshold=2.0 \
  algorithm.rollout_correction.bypass_mode=false \
  actor_rollout_ref.actor.optim.lr=1e-6 \
  actor_rollout_ref.actor.ppo_mini_batch_size=32 \
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 \
  actor_rollout_ref.actor.ppo_epochs=1 \
  actor_rollout_ref.actor.use_kl_loss=false \
  actor_rollout_ref.actor.entropy_coeff=0 \
  actor_rollout_ref.actor.loss_agg_mode=token-mean \
  actor_rollout_ref.actor.policy_loss._target_=nano_respo.integrations.verl.ReSPOPolicyLossConfig \
  actor_rollout_ref.actor.policy_loss.loss_mode=respo \
  +actor_rollout_ref.actor.policy_loss.rollout_is_level=sequence \
  trainer.n_gpus_per_node="$GPUS" \
  trainer.nnodes=1 \
  trainer.total_epochs=15 \
  trainer.logger='["console"]' \
  trainer.project_name=nano-respo \
  trainer.experiment_name=respo-gsm8k \
  "$@"

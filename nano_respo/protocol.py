"""Named flag sets of train.py: `--protocol paper` sets the paper's training protocol, as its authors ran it.

Each value is read from the authors' launcher, `recipe/respo/scripts/train_qwen3_1_7b.sh` of
yhangchen/ReSPO-code (a verl fork), or, where the launcher leaves a key alone, from verl's defaults
that it runs with (`verl/trainer/config/ppo_trainer.yaml`; the actor's `actor/actor.yaml`). A preset
sets defaults only: a flag given beside it wins (`--protocol paper --method grpo --reuse 16 ...`).
What still differs from the authors' runs (the sampler, the data, the sizes) is listed once in
docs/training.md, "The paper's protocol".
"""

from __future__ import annotations

# N = 8, the launcher's default `train_batch_n`; N = 16 and 32 change reuse, prompts and iterations together.
PAPER_N = 8

PROTOCOLS = {
    "paper": {
        "reuse": PAPER_N,  # N mini-batches per rollout batch: train_batch_size = ppo_mini_batch_size * N
        "epochs": 1,  # actor.ppo_epochs: 1 (verl's actor.yaml default; the launcher leaves it)
        "prompts_per_iteration": 32 * PAPER_N,  # ppo_mini_batch_size=32 prompts per mini-batch, times N
        "group_size": 8,  # n_resp_per_prompt=8 (actor_rollout_ref.rollout.n)
        "iterations": 1024 // PAPER_N,  # total_training_steps=$((1024 / train_batch_n)): 1,024 updates
        "temperature": 1.0,  # temperature=1.0, top_p=1.0, top_k=-1
        "agg": "token-mean",  # loss_agg_mode="token-mean"
        "adv_scale": "std",  # adv_estimator=grpo with algorithm.norm_adv_by_std_in_grpo: True (ppo_trainer.yaml)
        "weight_against": "pi_old",  # verl recomputes old_log_prob with the actor before the updates; the loss
        "correction": "none",  # folds rollout_is_weights only when rollout correction is on, and the launcher
        #                        leaves algorithm.rollout_correction at its default (off)
        "lr": 1e-6,  # actor_rollout_ref.actor.optim.lr=1e-6
        "lr_warmup_ratio": 0.05,  # optim.lr_warmup_steps_ratio=${warmup_steps_ratio}, warmup_steps_ratio=0.05
        "weight_decay": 0.1,  # actor_rollout_ref.actor.optim.weight_decay=0.1
        "max_grad_norm": 1.0,  # actor_rollout_ref.actor.grad_clip=1.0
        # No KL (use_kl_loss=false, use_kl_in_reward=false, kl_coef=0.0) and entropy_coeff=0: this trainer has
        # neither term, so nothing is set for them.
    },
}

"""Scale-out, and faster routes to the numbers of rollout.py's plain forms, one module each.

distributed.py (FSDP2 over torchrun, --fsdp) and logprobs.py (log-probs without the [B, T, V] logits,
--logprob-chunk-mb) scale out; packed.py (--packed-forward), shared_prompts.py (--shared-prompts) and
lean_sampler.py (--lean-sampler) do less work for the same numbers. The step (trainer.rl_iteration) reads none
of them: run/session.routes picks each route and hands it in. A default single-device run takes two, both on
by default: shared_prompts.py for RL's training forward (an MoE model's balance loss from packed.py) and lean_sampler.py for
sampling. The plain references they are tested against (tests/step/test_less_work.py) are rollout.py's
policy_logprobs and decode, which a run with --no-shared-prompts --no-lean-sampler takes.
"""

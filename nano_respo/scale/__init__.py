"""Opt-in routes, one module each, imported only when a flag of train.py asks (train.routes_of, set_up).

distributed.py (FSDP2 over torchrun, --fsdp) and logprobs.py (log-probs without the [B, T, V] logits,
--logprob-chunk-mb) scale out; packed.py (--packed-forward) and shared_prompts.py (--shared-prompts) compute the
training forward's numbers with less work. A default run takes none of them: it runs rollout.policy_logprobs, the
plain form every route is tested against (tests/step/test_less_work.py).
"""

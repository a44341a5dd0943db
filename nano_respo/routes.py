"""The flags of train.py's opt-in routes: the default path's numbers, faster or in less memory.

Each route is a module of nano_respo/scale/, imported only when its flag asks (train.routes_of), so a default run
imports none of them; each is held equal to the plain form, rollout.policy_logprobs (tests/step/test_less_work.py,
tests/step/test_trainer_parts.py, tests/run/test_fsdp.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RouteConfig:
    """Opt-in routes to the same numbers, faster or in less memory (nano_respo/routes.py)."""
    logprob_chunk_mb: float | None = None
    """Large vocabularies: log-probs without the [B, T, V] logits, this many MB of float32 logits at a time (scale.logprobs)."""
    packed_forward: bool = False
    """The training forward without padding, sequences packed into rows (scale.packed)."""
    shared_prompts: bool = False
    """The training forward with each distinct prompt computed once (scale.shared_prompts)."""
    fsdp: bool = False
    """FSDP2 over torchrun's processes; torchrun --nproc_per_node N train.py --fsdp (scale.distributed)."""

    def __post_init__(self):
        if self.logprob_chunk_mb is not None and not self.logprob_chunk_mb > 0:
            raise ValueError(f"logprob_chunk_mb: must be > 0, got {self.logprob_chunk_mb}")
        if self.shared_prompts and (self.packed_forward or self.logprob_chunk_mb is not None or self.fsdp):
            raise ValueError("shared_prompts: a route of its own, not combined with --packed-forward, "
                             "--logprob-chunk-mb or --fsdp")


"""The configs of train.py, below both the trainer and the session: every flag, each with its one-line docstring.

StepConfig holds what one RL step reads, LossConfig (kernel.py) the policy loss; TrainConfig
adds the model, the task, the warm start and the run around them. Every value is checked here,
so a bad flag fails in one line before anything loads. run/cli.py makes the flags from these
fields and their docstrings.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from .kernel import SCALES, LossConfig, reuse_split
from .models import PROMPT_FORMATS, TINY_MODELS, WEIGHT_DTYPES, check_device, resolve_model_path

# How long the cosine runs (--sft-anneal): budget, a quarter of `steps` (sft.LR_SCHEDULE); the others, a share of
# the step the model converged at (a quarter of `steps` when it did not), so it stops about when it has what
# it needs: converged a quarter of that step, converged-half half of it (research/WARMSTART.md).
CONVERGED_SHARE = {"converged": 4, "converged-half": 2}  # annealing = convergence step // this
ANNEALS = ("budget", *CONVERGED_SHARE)


def hash_seed(*parts) -> int:
    """A seed named by its parts ("rl", seed, iteration): each draw of a run (`seed` below) gets its own stream."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:4], "little")


@dataclass
class StepConfig:
    """What one RL step reads: its rollout batch, advantages, reuse loop and loss (flags of train.py)."""
    prompts_per_iteration: int = 32
    """Prompts per rollout batch (P); the batch holds P x group_size episodes."""
    group_size: int = 8
    """Completions sampled per prompt (G); advantages are centred within each group."""
    reuse: int = 4
    """Optimizer steps per rollout batch (epochs x mini-batches); 1 = on-policy. The paper's reuse N: --reuse N --epochs 1."""
    epochs: int = 1
    """Passes over each rollout batch (at most reuse); mini-batches (of whole groups) per pass = reuse / epochs. 1, as the paper: each response used once, the k-th mini-batch k - 1 updates stale."""
    max_new_tokens: int = 48
    """Generation budget; a completion without EOS within it is truncated (and usually wrong)."""
    temperature: float = 1.0
    """Sampling temperature; the training forward divides logits by the same value so w = 1 on a fresh batch."""
    adv_scale: str = "none"
    """Group advantage scaling: none (A = r - group mean) or std (also divide by the group std, as GRPO)."""
    max_grad_norm: float = 1.0
    """Gradient clipping threshold (total L2 norm)."""
    router_aux_coef: float = 0.0
    """MoE only: coefficient of the router load-balancing loss added to the policy loss (always logged)."""
    rollout_batch: int | None = None
    """Sequences per sampler call (bounds the KV cache); None = the whole rollout batch at once."""
    micro_batch: int | None = None
    """Sequences per forward/backward; gradients accumulate over a mini-batch. None = the whole mini-batch."""
    seed: int = 0
    """Seed of sampling, mini-batch order and the task's training problems."""
    loss: LossConfig = field(default_factory=LossConfig)
    """The policy loss (its fields are flags of their own: --method, --alpha-pos, ...)."""

    def __post_init__(self):
        for name in ("prompts_per_iteration", "reuse", "epochs", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.group_size < 2:  # an advantage is a reward minus its group's mean: a group of one has 0
            raise ValueError(f"group_size: must be >= 2, got {self.group_size}; a group of one has advantage 0 "
                             f"(its reward minus its own mean), so nothing would be learned")
        for name in ("micro_batch", "rollout_batch"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.prompts_per_iteration % self.minibatches:
            raise ValueError(f"reuse: {self.prompts_per_iteration} prompts do not split into {self.minibatches} "
                             f"mini-batches of whole groups (reuse / epochs); {self.reuse_ways_out()}")
        if not self.temperature > 0:
            raise ValueError(f"temperature: must be > 0, got {self.temperature}")
        if self.adv_scale not in SCALES:
            raise ValueError(f"adv_scale: unknown scale {self.adv_scale!r}; choose one of {', '.join(SCALES)}")
        if not (math.isfinite(self.max_grad_norm) and self.max_grad_norm > 0):
            raise ValueError(f"max_grad_norm: must be > 0, got {self.max_grad_norm}")

    @property
    def minibatches(self) -> int:
        return reuse_split(self.reuse, self.epochs)[1]

    def reuse_ways_out(self) -> str:
        """The nearest settings that split: a --reuse on each side whose mini-batches divide the prompts, and the
        fewest --epochs (a divisor of reuse) that make the mini-batches divide them."""
        prompts, epochs = self.prompts_per_iteration, reuse_split(self.reuse, self.epochs)[0]
        splits = [m for m in range(1, prompts + 1) if prompts % m == 0]
        below = max(m for m in splits if m < self.minibatches)
        above = [m for m in splits if m > self.minibatches][:1]
        reuses = " or ".join(f"--reuse {epochs * m}" for m in [below, *above])
        fewest = min(e for e in range(1, self.reuse + 1) if self.reuse % e == 0 and prompts % (self.reuse // e) == 0)
        cut = self.reuse // fewest
        return (f"give {reuses} (mini-batches that divide {prompts}), or --epochs {fewest} "
                f"({fewest} passes over {cut} mini-batch{'es' if cut > 1 else ''})")

    @property
    def step_loss(self) -> LossConfig:
        """The loss as the step runs it: Dr. GRPO's constant divisor defaults to the generation budget, so
        every mini-batch and rank divides alike."""
        return self.loss if self.loss.norm_len else replace(self.loss, norm_len=self.max_new_tokens)


@dataclass
class TrainConfig(StepConfig):
    """Train a Qwen3 (tiny offline default, or any hub id / local dir) with RLVR and rollout reuse."""

    model: str = "tiny-qwen3"
    """tiny-qwen3, tiny-qwen3-moe (offline, random init), a hub id (Qwen/Qwen3-0.6B) or a local/run directory."""
    task: str = "reverse"
    """addition, reverse (long answers), a task registered in nano_respo.tasks.TASKS, or a .jsonl file of {"prompt": ..., "answer": ...} lines."""
    prompt_format: str = "template"
    """How prompts reach the model: template (the checkpoint's chat template; Qwen3's chat model thinks), no-thinking (Qwen3's template with thinking off), plain (no template: a Base model's plain prompt)."""
    task_size: int | None = None
    """Task difficulty: digits per operand (addition), string length (reverse); None = the task's default."""
    heldout_file: str | None = None
    """JSONL tasks: held-out problems from this file instead of a hashed tenth of --task."""
    iterations: int = 40
    """RL iterations; each samples one rollout batch and takes `reuse` optimizer steps on it."""
    lag: int = 0
    """Rollout staleness: sample with the weights of `lag` iterations earlier, as asynchronous RL does (0 = current)."""
    sampler_dtype: str = "float32"
    """Rollout weights: float32 samples with the learner's own; bfloat16 / float16 a copy cast to it (train-inference mismatch)."""
    lr: float = 1e-4
    """AdamW learning rate for RL (constant after any --lr-warmup-ratio)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    lr_warmup_ratio: float = 0.0
    """Linear learning-rate warm-up from 0 over this share of the iterations, stepped once per rollout batch as verl's constant schedule with warm-up (the paper's runs: 0.05); constant after. 0 = none."""
    sft_steps: int | None = None
    """Warm-start SFT budget (cached): constant lr until converged or this many steps, then cosine to 0 over a quarter of it; None = 2000 for the tiny models, 0 otherwise."""
    sft_anneal: str = "budget"
    """Warm-start annealing length, from convergence (or the budget) to lr 0: budget, a quarter of --sft-steps; converged (converged-half), a quarter (half) of the step it converged at."""
    sft_batch: int = 64
    """Warm-start batch size (demonstrations per step)."""
    sft_lr: float = 1e-3
    """Warm-start AdamW peak learning rate (cosine decay to 0)."""
    sft_label_smoothing: float = 0.01
    """Warm-start label smoothing eps: the converged model keeps about eps off each answer token, so samples err more on long answers."""
    sft_task_size: int | None = None
    """Warm-start task size (shorter demonstrations than RL's task); None = --task-size. Generated tasks only."""
    sft_full_share: float = 0.0
    """Share of warm-start demonstrations drawn from the whole RL task instead of --sft-task-size (long answers shown rarely)."""
    sft_seed: int = 0
    """Warm-start seed, fixed apart from --seed so that every RL seed starts from the same model."""
    sft_from_scratch: bool = False
    """Train the warm start here (or take it from the cache) even where one ships with the package for these settings (nano_respo/warm_starts/)."""
    eval_every: int = 10
    """Evaluate on the held-out split every this many iterations (and at the start and the end)."""
    eval_problems: int = 128
    """Held-out problems evaluated."""
    eval_samples: int = 4
    """Tempered samples per held-out problem for pass@1 / pass@k (k = eval_samples)."""
    save_every: int = 20
    """Checkpoint every this many iterations (and at the end and on Ctrl-C)."""
    resume: bool = False
    """Continue runs/<name> from its latest checkpoint (same flags; --iterations may grow)."""
    name: str | None = None
    """Run name: outputs go to <out_dir>/<name>/; None = <task>-<model>-<method>-reuse<reuse>[-lag<lag>]-seed<seed>."""
    out_dir: str = "runs"
    """Directory that holds the runs."""
    keep_checkpoints: int = 2
    """Checkpoints kept on disk (each a full model and optimizer state): the newest N; older ones are deleted."""
    threads: int = 1
    """torch CPU threads (more threads on a loaded small machine can be many times slower)."""
    device: str = "auto"
    """Device: auto (cuda when available, else cpu), cpu, cuda or cuda:N."""
    dtype: str = "float32"
    """Weights: float32 (GPU: with --autocast) or bfloat16 / float16 (half the memory, loses tiny updates)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (large models)."""
    autocast: bool = False
    """CUDA only: run forwards and sampling under bfloat16 autocast; weights and AdamW stay in --dtype."""
    logprob_chunk_mb: float | None = None
    """Large vocabularies: log-probs by the chunked routine holding this many MB of float32 logits (16 suits a CPU, 256 a GPU); None = a plain log-softmax."""
    packed_forward: bool = False
    """RL's training forward without padding: each micro-batch's sequences packed into rows, attention confined to each sequence (scale.packed); the same log-probs up to float noise."""
    shared_prompts: bool | None = None
    """RL's training forward with each distinct prompt computed once, a row per prompt with its completions after it (scale.shared_prompts); the same log-probs up to float noise. None = on where it applies (not with --packed-forward, --logprob-chunk-mb or --fsdp); --no-shared-prompts for the padded forward."""
    lean_sampler: bool = True
    """Rollouts by scale.lean_sampler.decode_lean: each prompt prefilled once for its G samples, finished rows dropped from the decode batch; the same distribution, other draws. --no-lean-sampler for rollout.decode."""
    plots: bool = True
    """Write plots.png at the end."""
    fsdp: bool = False
    """Shard the model with FSDP2 over torchrun's processes: torchrun --nproc_per_node N train.py --fsdp."""

    def __post_init__(self):
        super().__post_init__()
        if not self.model.strip():
            raise ValueError("model: empty model name")
        if self.lag < 0:
            raise ValueError(f"lag: must be >= 0, got {self.lag}")
        if self.lag and self.fsdp:
            raise ValueError("lag: a lagged sampler is not supported under --fsdp")
        if self.prompt_format not in PROMPT_FORMATS:
            raise ValueError(f"prompt_format: choose one of {', '.join(PROMPT_FORMATS)}, got {self.prompt_format!r}")
        if self.sampler_dtype not in WEIGHT_DTYPES:
            raise ValueError(f"sampler_dtype: choose one of {', '.join(WEIGHT_DTYPES)}, got {self.sampler_dtype!r}")
        if self.sampler_dtype != "float32" and self.fsdp:
            raise ValueError("sampler_dtype: a separate low-precision sampler is not supported under --fsdp")
        for name in ("iterations", "sft_batch", "eval_every", "eval_problems", "eval_samples", "save_every",
                     "threads", "keep_checkpoints"):  # keep_checkpoints: --resume needs one
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.shared_prompts and (self.packed_forward or self.logprob_chunk_mb is not None or self.fsdp):
            raise ValueError("shared_prompts: a route of its own, not combined with --packed-forward, "
                             "--logprob-chunk-mb or --fsdp")
        if self.logprob_chunk_mb is not None and self.logprob_chunk_mb < 1:
            raise ValueError(f"logprob_chunk_mb: must be >= 1, got {self.logprob_chunk_mb}")
        if self.sft_steps is not None and self.sft_steps < 0:
            raise ValueError(f"sft_steps: must be >= 0, got {self.sft_steps}")
        if self.sft_anneal not in ANNEALS:
            raise ValueError(f"sft_anneal: choose one of {', '.join(ANNEALS)}, got {self.sft_anneal!r}")
        if self.dtype not in WEIGHT_DTYPES:
            raise ValueError(f"dtype: choose one of {', '.join(WEIGHT_DTYPES)}, got {self.dtype!r}")
        for name in ("lr", "sft_lr"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)}")
        if not 0 <= self.lr_warmup_ratio < 1:
            raise ValueError(f"lr_warmup_ratio: must lie in [0, 1), got {self.lr_warmup_ratio}")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"weight_decay: must be >= 0, got {self.weight_decay}")
        if not 0 <= self.sft_label_smoothing < 1:
            raise ValueError(f"sft_label_smoothing: must lie in [0, 1), got {self.sft_label_smoothing}")
        if self.sft_task_size is not None and self.task.endswith(".jsonl"):
            raise ValueError("sft_task_size: only generated tasks have a size; a .jsonl task warms up on its file")
        if not 0 <= self.sft_full_share <= 1:
            raise ValueError(f"sft_full_share: must lie in [0, 1], got {self.sft_full_share}")
        if self.sft_full_share and self.sft_task_size is None:
            raise ValueError("sft_full_share: mixes --sft-task-size's demonstrations with the whole task's; "
                             "give --sft-task-size too")
        check_device(self.device)
        if self.model not in TINY_MODELS:  # a local directory is checked now (a few small files, nothing loaded)
            resolve_model_path(self.model)

    def lr_at(self, iteration: int) -> float:
        """RL's learning rate through an iteration's updates: lr * iteration / W for the first W = int(ratio x
        iterations) iterations (0 at the first, as verl's and transformers' constant schedule with warm-up), then lr."""
        warmup = int(self.lr_warmup_ratio * self.iterations)
        return self.lr * iteration / warmup if iteration < warmup else self.lr

    @property
    def shared_prompt_forward(self) -> bool:
        """Whether RL's training forward computes each prompt once (--shared-prompts, on by default where it applies)."""
        if self.shared_prompts is not None:
            return self.shared_prompts
        return not (self.packed_forward or self.logprob_chunk_mb is not None or self.fsdp)

    @property
    def run_name(self) -> str:
        task = self.task.rsplit("/", 1)[-1].removesuffix(".jsonl")
        model = Path(self.model.rstrip("/")).name
        lag = f"-lag{self.lag}" if self.lag else ""
        return self.name or f"{task}-{model}-{self.loss.method}-reuse{self.reuse}{lag}-seed{self.seed}"

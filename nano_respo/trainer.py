"""The single-device RLVR loop with explicit rollout reuse; `rl_iteration` is one RL step.

    for each iteration:
        sample G completions for each of P prompts, recording log mu      (rollout.sample;
            mu = the current weights, or with --lag k those of k iterations earlier)
        reward, group advantages                                           (kernel)
        reuse = epochs x mini-batches optimizer steps on this batch        (rl_step)
        log; every eval_every iterations evaluate held-out; every save_every checkpoint

Under torchrun --fsdp the same loop runs on every rank; what differs is confined to the
`ranks` object (OneProcess here, distributed.Ranks there) and the fenced blocks of `train`.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import signal
import time
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from tqdm import tqdm

from .checkpoint import (is_sharded, latest_checkpoint, load_trainer_state, newest_intact_checkpoint,
                         remove_temporary_checkpoints, save_checkpoint, set_rng_state)
from .cli import flat
from .evaluation import evaluate
from .kernel import SCALES, LossConfig, group_advantages, loss_denominator, policy_loss
from .logprobs import chunked_policy_logprobs
from .metrics import MetricsLog
from .models import TINY_WARM_START_STEPS, load_model, refuse_unknown_characters, resolve_device
from .preflight import validate_run_args
from .rollout import RolloutBatch, policy_logprobs, sample, score
from .runlock import run_lock
from .sft import warm_start
from .tasks import hash_seed, make_task


@dataclass
class StepConfig:
    """What one RL step reads: its rollout batch, advantages and reuse loop (flags of train.py)."""
    prompts_per_iteration: int = 32
    """Prompts per rollout batch (P); the batch holds P x group_size episodes."""
    group_size: int = 8
    """Completions sampled per prompt (G); advantages are centred within each group."""
    reuse: int = 4
    """Optimizer steps per rollout batch (epochs x mini-batches); 1 = on-policy."""
    epochs: int = 2
    """Passes over each rollout batch; mini-batches (of whole groups) per pass = reuse / epochs."""
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

    def __post_init__(self):
        for name in ("prompts_per_iteration", "group_size", "reuse", "epochs", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        for name in ("micro_batch", "rollout_batch"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.reuse % self.epochs:
            raise ValueError(f"reuse: {self.reuse} optimizer steps do not split into {self.epochs} epochs")
        if self.prompts_per_iteration % self.minibatches:
            raise ValueError(f"reuse: {self.prompts_per_iteration} prompts do not split into {self.minibatches} "
                             f"mini-batches of whole groups (reuse / epochs)")
        if self.temperature <= 0:
            raise ValueError(f"temperature: must be > 0, got {self.temperature}")
        if self.adv_scale not in SCALES:
            raise ValueError(f"adv_scale: unknown scale {self.adv_scale!r}; choose one of {', '.join(SCALES)}")
        if self.max_grad_norm <= 0:
            raise ValueError(f"max_grad_norm: must be > 0, got {self.max_grad_norm}")

    @property
    def minibatches(self) -> int:
        return self.reuse // self.epochs


@dataclass
class TrainConfig(StepConfig):
    """Train a Qwen3 (tiny offline default, or any hub id / local dir) with RLVR and rollout reuse."""

    loss: LossConfig = field(default_factory=LossConfig)
    """The policy loss (its fields are flags of their own: --method, --alpha-pos, ...)."""
    model: str = "tiny-qwen3"
    """tiny-qwen3, tiny-qwen3-moe (offline, random init), a hub id (Qwen/Qwen3-0.6B) or a local/run directory."""
    task: str = "reverse"
    """addition, reverse (long answers), or a .jsonl file of {"prompt": ..., "answer": ...} lines."""
    task_size: int | None = None
    """Task difficulty: digits per operand (addition) or string length (reverse); None = the task's default."""
    heldout_file: str | None = None
    """JSONL tasks: held-out problems from this file instead of a hashed tenth of --task."""
    iterations: int = 40
    """RL iterations; each samples one rollout batch and takes `reuse` optimizer steps on it."""
    lag: int = 0
    """Rollout staleness: sample with the weights of `lag` iterations earlier, as asynchronous RL does (0 = current)."""
    lr: float = 1e-4
    """AdamW learning rate for RL (constant)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    sft_steps: int | None = None
    """Warm-start SFT steps before RL (cached; lr annealed to 0 over them); None = 2000 for the tiny models, 0 otherwise."""
    sft_batch: int = 64
    """Warm-start batch size (demonstrations per step)."""
    sft_lr: float = 1e-3
    """Warm-start AdamW peak learning rate (cosine decay to 0)."""
    sft_label_smoothing: float = 0.01
    """Warm-start label smoothing eps: the converged model keeps about eps off each answer token, so samples err more on long answers."""
    sft_task_size: int | None = None
    """Warm-start task size (shorter demonstrations than RL's task); None = --task-size. Generated tasks only."""
    sft_seed: int = 0
    """Warm-start seed, fixed apart from --seed so that every RL seed starts from the same model."""
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
    """Run name: outputs go to <out_dir>/<name>/; None = <task>-<method>-reuse<reuse>-seed<seed>."""
    out_dir: str = "runs"
    """Directory that holds the runs."""
    keep_checkpoints: int = 2
    """Checkpoints kept on disk (each a full model and optimizer state): the newest N; older ones are deleted."""
    threads: int = 1
    """torch CPU threads (more threads on a loaded small machine can be many times slower)."""
    device: str = "auto"
    """Device: auto (cuda when available, else cpu), cpu, cuda or cuda:N."""
    dtype: str = "float32"
    """Weight dtype: float32 (with --autocast on GPU), or bfloat16 / float16 (half the memory; loses tiny updates)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (large models)."""
    autocast: bool = False
    """CUDA only: run forwards and sampling under bfloat16 autocast; weights and AdamW stay in --dtype."""
    logprob_chunk_mb: float | None = None
    """Large vocabularies: log-probs by the chunked routine holding this many MB of float32 logits (16 suits a CPU, 256 a GPU); None = a plain log-softmax."""
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
        for name in ("iterations", "sft_batch", "eval_every", "eval_problems", "eval_samples", "save_every",
                     "threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.logprob_chunk_mb is not None and self.logprob_chunk_mb < 1:
            raise ValueError(f"logprob_chunk_mb: must be >= 1, got {self.logprob_chunk_mb}")
        if self.sft_steps is not None and self.sft_steps < 0:
            raise ValueError(f"sft_steps: must be >= 0, got {self.sft_steps}")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"dtype: choose float32, bfloat16 or float16, got {self.dtype!r}")
        for name in ("lr", "sft_lr"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)}")
        if not 0 <= self.sft_label_smoothing < 1:
            raise ValueError(f"sft_label_smoothing: must lie in [0, 1), got {self.sft_label_smoothing}")
        if self.sft_task_size is not None and self.task.endswith(".jsonl"):
            raise ValueError("sft_task_size: only generated tasks have a size; a .jsonl task warms up on its file")

    @property
    def run_name(self) -> str:
        return self.name or f"{self.task.rsplit('/', 1)[-1].removesuffix('.jsonl')}-{self.loss.method}-reuse{self.reuse}-seed{self.seed}"


# Config fields a --resume may change without changing what the run computes; a run
# directory may be moved or renamed, so its location is one of them.
RESUMABLE = {"iterations", "resume", "threads", "plots", "save_every", "keep_checkpoints", "device", "fsdp",
             "out_dir", "name"}


class OneProcess:
    """What a step shares with other processes, on one device: nothing (distributed.Ranks under --fsdp)."""

    rank, world_size = 0, 1

    def all_agree(self, flag: torch.Tensor) -> bool:
        return bool(flag)

    def loss_factor(self, denominator: torch.Tensor) -> float:
        return 1.0

    def barrier(self) -> None:
        pass

    def gathered(self, model):
        return contextlib.nullcontext()


ONE_PROCESS = OneProcess()


def rl_step(model, optimizer, batch: RolloutBatch, loss_cfg: LossConfig, temperature: float, max_grad_norm: float,
            micro_batch: int | None = None, router_aux_coef: float = 0.0, logprobs=policy_logprobs,
            ranks=ONE_PROCESS) -> dict:
    """One optimizer step on one mini-batch, gradients accumulated over micro-batches.

    A NaN/inf log-prob, loss or gradient skips the step: weights and optimizer state stay untouched (under FSDP on
    every rank together). Each micro-batch's loss is scaled by its share of the mini-batch's kernel.loss_denominator,
    so the scaled losses sum to the mini-batch's loss; loss_cfg.norm_len must be set for that under -norm.
    """
    n = len(batch.advantages)
    full_mask = batch.completion_mask  # [B, C]
    denominator = loss_denominator(full_mask, loss_cfg.agg, loss_cfg.norm_len)
    loss_factor = ranks.loss_factor(denominator)  # 1 on one device; this rank's share of the global loss
    logp_all = torch.zeros_like(batch.old_logp)  # [B, C] detached, for the mini-batch statistics
    entropy_all = torch.zeros_like(batch.old_logp)  # [B, C]
    loss_total, aux_total = 0.0, None
    optimizer.zero_grad(set_to_none=True)
    for rows in torch.arange(n, device=full_mask.device).split(micro_batch or n):
        micro = batch.select(rows)
        width = micro.completion_mask.shape[1]
        logp, entropy, aux_loss = logprobs(model, micro, temperature, with_entropy=True)  # [b, c]: log pi
        logp_all[rows, :width], entropy_all[rows, :width] = logp.detach(), entropy
        if not ranks.all_agree(torch.where(micro.completion_mask, logp.detach(), 0.0).isfinite().all()):
            optimizer.zero_grad(set_to_none=True)
            return {"skipped": 1, "skip_reason": "non-finite log-prob"}
        # ReSPO: the method lives in this one call (loss_cfg.method); everything around it is plain RL.
        loss, _ = policy_loss(logp, micro.old_logp, micro.advantages, micro.completion_mask, loss_cfg)
        share = loss_denominator(micro.completion_mask, loss_cfg.agg, loss_cfg.norm_len) / denominator.clamp(min=1)
        loss = loss * share * loss_factor
        if aux_loss is not None:
            aux_total = (aux_total or 0.0) + aux_loss.item() * len(rows) / n
            if router_aux_coef:
                loss = loss + router_aux_coef * aux_loss * len(rows) / n
        if not ranks.all_agree(loss.isfinite()):
            optimizer.zero_grad(set_to_none=True)
            return {"skipped": 1, "skip_reason": "non-finite loss"}
        loss.backward()
        loss_total += loss.item()
    _, stats = policy_loss(logp_all, batch.old_logp, batch.advantages, full_mask, loss_cfg)
    stats.update(loss=loss_total, entropy=entropy_all[full_mask].mean().item() if full_mask.any() else float("nan"))
    if aux_total is not None:
        stats["router_aux_loss"] = aux_total
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    if not grad_norm.isfinite():
        optimizer.zero_grad(set_to_none=True)
        return {**stats, "grad_norm": grad_norm.item(), "skipped": 1, "skip_reason": "non-finite gradient"}
    optimizer.step()
    return {**stats, "grad_norm": grad_norm.item(), "skipped": 0}


def collect_rollouts(model, tokenizer, task, cfg: StepConfig, iteration: int, ranks=ONE_PROCESS):
    """This process's prompts, G samples of each with log mu, and their rewards: (samples, rewards [N], stats)."""
    problems = task.train_batch(cfg.prompts_per_iteration, seed=hash_seed("rl", cfg.seed, iteration))
    per_rank = len(problems) // ranks.world_size  # whole prompts, so whole groups (all of them on one device)
    problems = problems[ranks.rank * per_rank:(ranks.rank + 1) * per_rank]
    grouped = [p for p in problems for _ in range(cfg.group_size)]
    start = time.perf_counter()
    with ranks.gathered(model):  # under FSDP: full weights for the whole rollout, no collectives while decoding
        samples = sample(model, tokenizer, [p.prompt for p in grouped], cfg.max_new_tokens, cfg.temperature,
                         batch_size=cfg.rollout_batch)
    gen_seconds = time.perf_counter() - start
    rewards, reward_errors = score(task.reward, samples.texts, [p.answer for p in grouped])
    if reward_errors:
        tqdm.write(f"iteration {iteration}: the reward function failed on {len(reward_errors)} of "
                   f"{len(samples.texts)} completions (scored 0); first: {reward_errors[0]}")
    lengths = samples.completion_mask.sum(-1)  # [N]
    stats = {"reward": rewards.mean().item(), "reward_errors": len(reward_errors),
             "empty_frac": sum(not t.strip() for t in samples.texts) / len(samples.texts),
             "response_len": lengths.float().mean().item(), "truncated_frac": samples.truncated.float().mean().item(),
             "gen_tokens_per_s": lengths.sum().item() / gen_seconds, "sample_text": samples.texts[0]}
    return samples, rewards.to(samples.input_ids.device), stats


def minibatch_order(n_groups: int, cfg: StepConfig, iteration: int, epoch: int) -> list[torch.Tensor]:
    """Each epoch, whole groups in a fresh random order cut into cfg.minibatches mini-batches (episode rows)."""
    generator = torch.Generator().manual_seed(hash_seed("order", cfg.seed, iteration, epoch))
    groups = torch.randperm(n_groups, generator=generator).view(cfg.minibatches, -1)  # [M, groups]
    return list((groups[:, :, None] * cfg.group_size + torch.arange(cfg.group_size)).flatten(1))  # M x [rows]


def rl_iteration(model, tokenizer, task, optimizer, cfg: StepConfig, loss_cfg: LossConfig, iteration: int,
                 step: int, logprobs=policy_logprobs, ranks=ONE_PROCESS,
                 sampler=None) -> tuple[RolloutBatch, list[dict]]:
    """One RL step: a rollout batch, then cfg.reuse = epochs x mini-batches optimizer steps on it.

    The behaviour policy mu is `sampler` (a lagged copy of the weights) or else the model; returns (batch, records).
    """
    # 1. Rollout: completions and, for ReSPO's weight w = pi / mu, log mu of each sampled token; rewards.
    samples, rewards, rollout_stats = collect_rollouts(sampler or model, tokenizer, task, cfg, iteration, ranks)
    # 2. Advantages: centred within each group of G samples of one prompt.
    advantages, adv_stats = group_advantages(rewards, cfg.group_size, cfg.adv_scale)
    if adv_stats["zero_var_frac"] == 1.0:
        tqdm.write(f"iteration {iteration}: every group has all-equal rewards, so this batch carries no signal")
    batch = RolloutBatch(samples.input_ids, samples.attention_mask, samples.completion_mask, samples.old_logp,
                         rewards, advantages.to(rewards.device))
    # 3. Reuse: the same episodes feed cfg.reuse optimizer steps; from the second on, pi differs from mu.
    records = []
    for epoch in range(cfg.epochs):
        for minibatch, rows in enumerate(minibatch_order(len(batch.rewards) // cfg.group_size, cfg, iteration,
                                                         epoch)):
            start = time.perf_counter()
            stats = rl_step(model, optimizer, batch.select(rows.to(batch.rewards.device)), loss_cfg,
                            cfg.temperature, cfg.max_grad_norm, cfg.micro_batch, cfg.router_aux_coef, logprobs, ranks)
            step += 1
            if stats["skipped"]:
                tqdm.write(f"step {step}: skipped ({stats['skip_reason']}); weights and optimizer unchanged")
            tokens = batch.completion_mask[rows].sum().item()
            records.append({"kind": "train", "iteration": iteration, "step": step, "epoch": epoch,
                            "minibatch": minibatch, **stats, **rollout_stats, "zero_var_frac": adv_stats["zero_var_frac"],
                            "train_tokens_per_s": tokens / (time.perf_counter() - start)})
    return batch, records


class LaggedPolicy:
    """The behaviour policy of asynchronous RL: the learner's weights as they were `lag` iterations ago.

    Each iteration keeps a CPU copy of the learner's weights; a second model holding the
    oldest kept copy samples the rollouts, so log mu is the lagged policy's and the first
    step's weights are w = pi_now / mu_lagged, not 1. The lag grows 0, 1, ..., lag over the
    first iterations (nothing older exists). Costs lag + 1 CPU copies of the weights.
    """

    def __init__(self, model, lag: int, kept: list[dict] | None = None):
        self.kept = deque(kept or [], maxlen=lag + 1)
        self.sampler = copy.deepcopy(model)

    def sampler_for(self, model):
        self.kept.append({k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()})
        self.sampler.load_state_dict(self.kept[0])
        return self.sampler

    @property
    def lag_now(self) -> int:
        return len(self.kept) - 1


class Stopped(KeyboardInterrupt):
    """A stop signal that could not wait for the end of an iteration; train.py prints its one
    line and exits with 128 + the signal's number, as a shell does for a killed process."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_code = 128 + signum


class StopRequest:
    """Ctrl-C (SIGINT) and SIGTERM (what schedulers and `docker stop` send), from start-up to exit.

    Inside the RL loop (`finish_iteration` set) the first one finishes the current iteration,
    saves a checkpoint and stops. Anywhere else (loading, the warm start, the first
    evaluation), and a second one in the loop, raise Stopped at once: saves are atomic, so
    stopping mid-way damages nothing, and the message says what --resume continues from.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, run_dir: Path | None = None):
        self.run_dir = run_dir
        self.finish_iteration = False
        self.requested = False
        self.stopping = False
        self.previous = {sig: signal.getsignal(sig) for sig in self.SIGNALS}

    def __enter__(self):
        try:
            for sig in self.SIGNALS:
                signal.signal(sig, self.handle)
        except ValueError:  # not the main thread: the signals keep their default meaning
            pass
        return self

    def handle(self, signum, frame):
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        if self.stopping:  # already unwinding: let the clean-up (the run lock) finish
            return
        if self.finish_iteration and not self.requested:
            self.requested = True
            again = "Ctrl-C again" if signum == signal.SIGINT else f"{name} again"
            tqdm.write(f"{name}: finishing this iteration, then saving a checkpoint ({again} to stop at once)")
            return
        self.stopping = True
        raise Stopped(f"{name}{' again' if self.requested else ''}: stopped at once; {self.resume_hint()}", signum)

    def resume_hint(self) -> str:
        if self.run_dir is None:
            return "nothing was saved"
        checkpoint = latest_checkpoint(self.run_dir)
        if checkpoint is not None:
            return f"`--resume` continues from {checkpoint.name}"
        if (self.run_dir / "metrics.jsonl").exists():
            return "no checkpoint yet, so `--resume` starts the run over"
        return "nothing was written yet, so the same command starts the run"

    def __exit__(self, *exc):
        try:
            for sig, previous in self.previous.items():
                signal.signal(sig, previous)
        except ValueError:
            pass


def build_task(cfg: TrainConfig):
    return make_task(cfg.task, cfg.task_size, cfg.eval_problems, cfg.heldout_file, seed=0)


def initial_model(cfg: TrainConfig, task, device: str, logprobs):
    sft_steps = cfg.sft_steps if cfg.sft_steps is not None else TINY_WARM_START_STEPS.get(cfg.model, 0)
    if sft_steps == 0:
        return load_model(cfg.model, cfg.dtype, device, cfg.gradient_checkpointing)
    # A smaller size draws from the same training split (held-out prompts are excluded by hash).
    sft_task = task if cfg.sft_task_size is None else make_task(cfg.task, cfg.sft_task_size, cfg.eval_problems,
                                                                cfg.heldout_file, seed=0)
    task_key = {"task": cfg.task, "task_size": cfg.sft_task_size or cfg.task_size}
    model, tokenizer = warm_start(cfg.model, sft_task, task_key, sft_steps, cfg.sft_batch, cfg.sft_lr, cfg.sft_seed,
                                  cfg.dtype, device, logprobs, cfg.sft_label_smoothing)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model, tokenizer


def evaluate_heldout(model, tokenizer, task, cfg: TrainConfig, amp, ranks=ONE_PROCESS) -> dict:
    """Held-out accuracy, pass@1, pass@k (every rank evaluates under FSDP: sampling runs gathered)."""
    with amp, ranks.gathered(model):
        return evaluate(model, tokenizer, task, cfg.max_new_tokens, cfg.temperature, cfg.eval_samples,
                        batch_size=cfg.rollout_batch or 256)


def save(run_dir: Path, model, tokenizer, optimizer, iteration: int, step: int, config: dict, ranks,
         keep: int = 2, lagged: LaggedPolicy | None = None) -> Path:
    if ranks is ONE_PROCESS:
        extra = {"lagged_weights": list(lagged.kept)} if lagged else {}
        return save_checkpoint(run_dir, model, tokenizer, iteration, step, config, optimizer.state_dict(),
                               keep=keep, extra=extra)
    from .distributed import checkpoint_state  # FSDP: the full weights, and every rank's shards as the payload

    model_state, optimizer_state, write_shards = checkpoint_state(model, optimizer)
    return save_checkpoint(run_dir, model, tokenizer, iteration, step, config, optimizer_state,
                           model_state=model_state, payload=write_shards, ranks=ranks, keep=keep)


def train(cfg: TrainConfig) -> Path:
    """Run (or resume) training; returns the run directory.

    Bad arguments are refused before anything loads, one process at a time owns a run
    directory (under FSDP torchrun owns the ranks, which share it), and Ctrl-C or SIGTERM
    is honoured from here to the end (StopRequest).
    """
    validate_run_args(cfg)
    task = build_task(cfg)  # data files checked before the run directory is touched
    run_dir = Path(cfg.out_dir) / cfg.run_name
    if cfg.resume and not run_dir.is_dir():
        raise ValueError(f"resume: no checkpoint in {run_dir}, and no run was started there; drop --resume to start it")
    with StopRequest(run_dir) as stop, contextlib.nullcontext() if cfg.fsdp else run_lock(run_dir):
        if not cfg.fsdp:
            remove_temporary_checkpoints(run_dir)
        return train_locked(cfg, run_dir, task, stop)


def train_locked(cfg: TrainConfig, run_dir: Path, task, stop: StopRequest) -> Path:
    from .metrics import write_plots

    torch.set_num_threads(cfg.threads)
    if cfg.fsdp:  # torchrun --nproc_per_node N train.py --fsdp: this process's device
        from . import distributed
        device = str(distributed.check_split(cfg.prompts_per_iteration, cfg.minibatches))
    else:
        device = resolve_device(cfg.device)
    if cfg.autocast and not device.startswith("cuda"):
        raise ValueError(f"autocast: bfloat16 autocast is for CUDA devices, not {device!r}")
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if cfg.autocast else contextlib.nullcontext()
    # Dr. GRPO's constant divisor: the generation budget, so every mini-batch and rank divides alike.
    loss_cfg = replace(cfg.loss, norm_len=cfg.loss.norm_len or cfg.max_new_tokens)
    logprobs = (policy_logprobs if cfg.logprob_chunk_mb is None
                else functools.partial(chunked_policy_logprobs, chunk_mb=cfg.logprob_chunk_mb))
    config = flat(cfg)
    checkpoint, skipped = newest_intact_checkpoint(run_dir) if cfg.resume else (None, [])
    for note in skipped:
        print(f"resume: {note}")
    if cfg.resume and checkpoint is None:
        # Stopped before its first save: nothing to continue from, so the run starts over.
        print(f"resume: {run_dir} has no intact checkpoint yet; starting the run over from iteration 0")
        (run_dir / "metrics.jsonl").unlink(missing_ok=True)
    if not cfg.resume and (run_dir / "metrics.jsonl").exists():
        raise ValueError(f"name: {run_dir} already holds a run; pass --resume or another --name")
    torch.manual_seed(cfg.seed)
    if checkpoint is None:
        model, tokenizer = initial_model(cfg, task, device, logprobs)
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        iteration, step = 0, 0
    else:
        state = load_trainer_state(checkpoint)
        changed = sorted(k for k in config if k not in RESUMABLE and state["config"].get(k) != config[k])
        if changed:
            raise ValueError(f"resume: flags differ from the checkpoint's run: {', '.join(changed)}")
        model, tokenizer = load_model(str(checkpoint), cfg.dtype, device, cfg.gradient_checkpointing)
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        optimizer.load_state_dict(state["optimizer"])
        set_rng_state(state["rng"])
        iteration, step = state["iteration"], state["step"]
    lagged = None
    if cfg.lag:
        lagged = LaggedPolicy(model, cfg.lag, state.get("lagged_weights") if checkpoint is not None else None)
    refuse_unknown_characters(tokenizer, (task.train_pool or []) + task.heldout_problems)
    ranks = ONE_PROCESS
    if cfg.fsdp:  # join the process group and shard; the loop below runs on every rank
        model, optimizer, ranks = distributed.shard(model, optimizer, checkpoint, cfg.seed, iteration)
    elif checkpoint is not None and is_sharded(checkpoint):  # an FSDP run's checkpoint, resumed in one process
        from .distributed import load_sharded
        load_sharded(checkpoint, model, optimizer)
    log = MetricsLog(run_dir, keep_until_iteration=iteration if checkpoint else None, write=ranks.rank == 0)
    if ranks.rank == 0:
        (run_dir / "config.json").write_text(json.dumps(config, indent=1))

    last_eval = log.last_eval() if checkpoint is not None else None
    if last_eval is None:
        last_eval = evaluate_heldout(model, tokenizer, task, cfg, amp, ranks)
        log.write({"kind": "eval", "iteration": iteration, "step": step, **last_eval})
    print(f"run: {run_dir}  start held-out accuracy {last_eval['heldout_acc']:.3f}")
    bar = tqdm(range(iteration, cfg.iterations), initial=iteration, total=cfg.iterations, desc="rl",
               dynamic_ncols=True)
    stop.finish_iteration = True
    for iteration in bar:
        model.train()
        start = time.perf_counter()
        with amp:
            sampler = lagged.sampler_for(model) if lagged else None
            _, records = rl_iteration(model, tokenizer, task, optimizer, cfg, loss_cfg, iteration, step,
                                      logprobs, ranks, sampler)
        for record in records:
            log.write({**record, "policy_lag": lagged.lag_now} if lagged else record)
        step = records[-1]["step"]
        done = iteration + 1
        log.write({"kind": "time", "iteration": iteration, "step": step,
                   "iteration_s": time.perf_counter() - start})
        if done % cfg.eval_every == 0 or done == cfg.iterations:
            last_eval = evaluate_heldout(model, tokenizer, task, cfg, amp, ranks)
            log.write({"kind": "eval", "iteration": done, "step": step, **last_eval})
        bar.set_postfix(reward=f"{records[-1]['reward']:.2f}", heldout=f"{last_eval['heldout_acc']:.2f}")
        if done % cfg.save_every == 0 or done == cfg.iterations or stop.requested:
            save(run_dir, model, tokenizer, optimizer, done, step, config, ranks, cfg.keep_checkpoints, lagged)
        iteration = done
        if stop.requested:
            break
    stop.finish_iteration = False
    bar.close()
    log.close()
    print(f"end held-out accuracy {last_eval['heldout_acc']:.3f} "
          f"(pass@1 {last_eval['heldout_pass@1']:.3f}) after {iteration} iterations, {step} optimizer steps")
    if cfg.plots and ranks.rank == 0:
        print(f"plots: {write_plots(run_dir)}")
    print(f"metrics: {run_dir / 'metrics.jsonl'}\ncheckpoint: {latest_checkpoint(run_dir)}")
    if stop.requested:
        print(f"stopped on request after iteration {iteration} of {cfg.iterations}; --resume continues")
    return run_dir

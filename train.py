"""RLVR with rollout reuse on a Qwen3, in one file: ReSPO (nano_respo/kernel.py) or a baseline it is compared with.

    python train.py                                # ReSPO at reuse 4 on the offline tiny Qwen3, task `reverse`
    python train.py --method grpo --reuse 8        # a clipped baseline at the paper's reuse N = 8
    python train.py --protocol paper --reuse 16    # the authors' protocol (nano_respo/protocol.py)
    python train.py --model Qwen/Qwen3-0.6B --task gsm8k_train.jsonl --device cuda --autocast
    torchrun --nproc_per_node 4 train.py --fsdp --model Qwen/Qwen3-0.6B --dtype bfloat16
    python train.py --help                         # the flags set first (--help-all: every flag)

One RL iteration (`rl_iteration`), repeated `iterations` times:

    1. sample: G = group_size completions for each of P = prompts_per_iteration prompts, recording log mu, the
       log-prob of each sampled token under the policy that sampled it (temperature applied)
    2. reward each completion with the task's verifier; advantage A = reward - its group's mean
    3. reuse: `reuse` optimizer steps on this one batch, epochs x mini-batches of whole groups; each step
       computes log pi of the same tokens and calls kernel.policy_loss, then clips the gradient and steps AdamW.
       From the second step on pi has moved: the data is off-policy and the sequence weight w = pi / mu != 1,
       which is what ReSPO's coefficient reads (W = pi / pi_old in the authors' runs: --weight-against pi_old)
    4. log the step's diagnostics (docs/training.md); every eval_every iterations the held-out pass@1, every
       save_every a checkpoint (runs/<name>/)

Left out, on purpose: a KL penalty and an entropy bonus (the paper's runs use neither), a value model (advantages
are group-relative), an inference engine (the sampler is a plain KV-cache loop, nano_respo/rollout.py) and every
systems route that gives the same numbers faster or in less memory: packed or shared-prompt forwards, chunked
log-probs, FSDP (nano_respo/scale/, each behind a flag and tested equal to the plain form). Three sources make
the data off-policy from the first step, each opt-in: --lag (staleness), --sampler-dtype (a lower-precision
sampler) and, on an MoE, the routers that such a sampler picks (nano_respo/offpolicy.py).
A run survives Ctrl-C and SIGTERM: the iteration finishes, a checkpoint is saved, `--resume` continues.
"""


import contextlib
import functools
import json
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from nano_respo.checkpoint import remove_temporary_checkpoints, resume_point, save_checkpoint, set_rng_state
from nano_respo.cli import check_values, flat, parse_config
from nano_respo.evaluation import evaluate
from nano_respo.kernel import (AGG_MODES, METHOD_TABLE, SCALES, WEIGHT_AGAINST, LossConfig, compute_dtype,
                               diagnostics, group_advantages, loss_denominator, minibatch_order, policy_loss,
                               reuse_split)
from nano_respo.models import (PROMPT_FORMATS, TINY_MODELS, WEIGHT_DTYPES, apply_prompt_format,
                               check_device, load_model, refuse_unknown_characters, resolve_device,
                               resolve_model_path)
from nano_respo.plots import write_plots
from nano_respo.protocol import PROTOCOLS
from nano_respo.routes import RouteConfig
from nano_respo.rollout import RolloutBatch, policy_logprobs, sample, score
from nano_respo.runs import MetricsLog, Stop, Stopped, progress, run_command, run_lock
from nano_respo.sft import WarmStartConfig, initial_model
from nano_respo.tasks import hash_seed, make_task


@dataclass
class TrainConfig:
    """Train a Qwen3 (the tiny offline default, a hub id or a local directory) with RLVR and rollout reuse."""
    model: str = "tiny-qwen3"
    """tiny-qwen3[-moe], a hub id or a local directory; the tiny ones are offline, random-init and warm-started (Qwen/Qwen3-0.6B is a hub id)."""
    task: str = "reverse"
    """addition, reverse, a task name or a .jsonl file; nano_respo.tasks.TASKS names them, reverse has long answers, a file holds {"prompt": ..., "answer": ...} lines."""
    iterations: int = 40
    """RL iterations; each samples one rollout batch and takes `reuse` optimizer steps on it."""
    reuse: int = 4
    """Optimizer steps per rollout batch; epochs x mini-batches of whole groups, 1 = on-policy. The paper's N: --reuse N --epochs 1."""
    epochs: int = 1
    """Passes over each rollout batch; at most reuse, mini-batches per pass = reuse / epochs."""
    group_size: int = 8
    """Completions sampled per prompt, G; advantages are centred within each group."""
    prompts_per_iteration: int = 32
    """Prompts per rollout batch, P; the batch holds P x group_size episodes."""
    lr: float = 1e-4
    """AdamW learning rate; constant after any --lr-warmup-ratio."""
    max_new_tokens: int = 48
    """Generation budget; a completion without EOS within it is truncated (and usually wrong)."""
    temperature: float = 1.0
    """Sampling temperature; the training forward divides the logits by the same value, so w = 1 on a fresh batch."""
    seed: int = 0
    """Seed of sampling, mini-batch order and training problems."""
    name: str | None = None
    """Run name, outputs in <out_dir>/<name>/; None = <task>-<model>-<method>-reuse<reuse>[-lag<lag>]-seed<seed>."""
    resume: bool = False
    """Continue <out_dir>/<name> from its latest checkpoint; same flags, --iterations may grow."""
    device: str = "auto"
    """auto, cpu, cuda or cuda:N; auto takes cuda when available."""
    dtype: str = "float32"
    """Weights: float32, bfloat16 or float16; on a GPU float32 with --autocast, or half the memory in bfloat16 (which loses tiny updates)."""
    autocast: bool = False
    """CUDA: forwards and sampling under bfloat16 autocast; weights and AdamW stay in --dtype."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass; for large models."""
    micro_batch: int | None = None
    """Sequences per forward and backward; gradients accumulate over a mini-batch. None = the whole mini-batch."""
    rollout_batch: int | None = None
    """Sequences per sampler call (bounds the KV cache); None = the whole rollout batch at once."""
    adv_scale: str = "none"
    """Group advantage scaling: none (A = r - group mean) or std (also divide by the group std, as GRPO and the paper)."""
    max_grad_norm: float = 1.0
    """Gradient clipping threshold (total L2 norm)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    lr_warmup_ratio: float = 0.0
    """Linear lr warm-up from 0 over this share of the iterations (verl's constant schedule with warm-up; the paper: 0.05)."""
    lag: int = 0
    """Staleness: sample with the weights of `lag` iterations earlier, as asynchronous RL does (nano_respo/offpolicy.py)."""
    sampler_dtype: str = "float32"
    """Rollout weights: float32 = the learner's own; bfloat16 / float16 a cast copy (train-inference mismatch)."""
    router_aux_coef: float = 0.0
    """MoE only: coefficient of the router load-balancing loss added to the policy loss (always logged)."""
    task_size: int | None = None
    """Task difficulty: digits per operand (addition), string length (reverse); None = the task's default."""
    heldout_file: str | None = None
    """JSONL tasks: held-out problems from this file instead of a hashed tenth of --task."""
    prompt_format: str = "template"
    """template (the checkpoint's chat template; Qwen3's chat model thinks), no-thinking, or plain (a Base model's plain prompt)."""
    eval_every: int = 10
    """Evaluate on the held-out split every this many iterations (and at the start and the end)."""
    eval_problems: int = 128
    """Held-out problems evaluated."""
    eval_samples: int = 4
    """Tempered samples per held-out problem for pass@1 / pass@k (k = eval_samples)."""
    save_every: int = 20
    """Checkpoint every this many iterations (and at the end and on Ctrl-C / SIGTERM)."""
    keep_checkpoints: int = 2
    """Checkpoints kept on disk (each a full model and optimizer state): the newest N."""
    out_dir: str = "runs"
    """Directory that holds the runs."""
    threads: int = 1
    """torch CPU threads (more threads on a loaded small machine can be many times slower)."""
    plots: bool = True
    """Write plots.png at the end."""
    loss: LossConfig = field(default_factory=LossConfig)
    """The policy loss: its fields are flags of their own (--method, --beta-pos, ...)."""
    sft: WarmStartConfig = field(default_factory=WarmStartConfig, metadata={"prefix": "sft_"})
    """The warm start (nano_respo/sft.py): its fields are flags --sft-steps, --sft-lr, ..."""
    routes: RouteConfig = field(default_factory=RouteConfig)
    """Opt-in routes to the same numbers (nano_respo/routes.py): --packed-forward, --shared-prompts, --fsdp, ..."""

    def __post_init__(self):  # every value checked here, so a bad flag fails in one line before anything loads
        check_values(self, at_least_one=("iterations", "reuse", "epochs", "prompts_per_iteration", "max_new_tokens",
                                         "eval_every", "eval_problems", "eval_samples", "save_every",
                                         "keep_checkpoints", "threads", "micro_batch", "rollout_batch"),
                     positive=("lr", "max_grad_norm", "temperature"),
                     in_range={"lr_warmup_ratio": (0, 1), "weight_decay": (0, math.inf), "lag": (0, math.inf)},
                     choices={"adv_scale": SCALES, "dtype": WEIGHT_DTYPES, "sampler_dtype": WEIGHT_DTYPES,
                              "prompt_format": PROMPT_FORMATS})
        if self.group_size < 2:  # an advantage is a reward minus its group's mean: a group of one has 0
            raise ValueError(f"group_size: must be >= 2, got {self.group_size}; a group of one learns nothing")
        epochs, minibatches = reuse_split(self.reuse, self.epochs)
        if self.prompts_per_iteration % minibatches:
            fits = [m for m in range(1, self.prompts_per_iteration + 1) if self.prompts_per_iteration % m == 0]
            raise ValueError(f"reuse: {self.prompts_per_iteration} prompts do not split into {minibatches} "
                             f"mini-batches of whole groups; give --reuse {epochs * max(m for m in fits if m < minibatches)} "
                             f"or another --prompts-per-iteration")
        if (self.lag or self.sampler_dtype != "float32") and self.routes.fsdp:
            raise ValueError("lag, sampler_dtype: a separate sampler is not supported under --fsdp")
        if self.sft.task_size is not None and self.task.endswith(".jsonl"):
            raise ValueError("sft_task_size: only generated tasks have a size; a .jsonl task warms up on its file")
        check_device(self.device)
        if not self.model.strip():
            raise ValueError("model: empty model name")
        if self.model not in TINY_MODELS:  # a missing local directory is named now, before anything loads
            resolve_model_path(self.model)

    @property
    def run_name(self) -> str:
        task, model = Path(self.task).name.removesuffix(".jsonl"), Path(self.model.rstrip("/")).name
        lag = f"-lag{self.lag}" if self.lag else ""
        return self.name or f"{task}-{model}-{self.loss.method}-reuse{self.reuse}{lag}-seed{self.seed}"

    def lr_at(self, iteration: int) -> float:
        """lr * iteration / W over the first W = int(ratio x iterations) iterations (0 at the first), then lr."""
        warmup = int(self.lr_warmup_ratio * self.iterations)
        return self.lr * iteration / warmup if iteration < warmup else self.lr


# What `python train.py --help` lists: what a default run and a Qwen3 on a GPU are set with first.
FIRST_FLAGS = ("model", "task", "iterations", "reuse", "epochs", "group_size", "prompts_per_iteration", "lr",
               "max_new_tokens", "seed", "name", "resume", "device", "dtype", "autocast", "gradient_checkpointing",
               "micro_batch", "fsdp", "method", "beta_pos", "weight_against")
EXAMPLES = "\n".join(["examples:", *(line for line in __doc__.splitlines()  # the docstring's commands
                                    if line.lstrip().startswith(("python train", "torchrun")) and "help" not in line),
                      "Every logged number: docs/training.md; the math: docs/math.md."])


# --- one RL iteration ----------------------------------------------------------------------------------------

class OneDevice:
    """What a step shares with other processes: nothing, on one device (scale.distributed.Ranks under --fsdp)."""
    rank, world_size = 0, 1

    def all_agree(self, flag): return bool(flag)
    def loss_factor(self, denominator): return 1.0
    def gathered(self, model): return contextlib.nullcontext()
    def barrier(self): pass


def collect_rollouts(model, tokenizer, task, cfg: TrainConfig, iteration: int, ranks=OneDevice()):
    """This process's prompts, G samples of each with log mu, their rewards: (samples, rewards [N], stats)."""
    problems = task.train_batch(cfg.prompts_per_iteration, seed=hash_seed("rl", cfg.seed, iteration))
    per_rank = len(problems) // ranks.world_size  # whole prompts, so whole groups
    grouped = [p for p in problems[ranks.rank * per_rank:(ranks.rank + 1) * per_rank] for _ in range(cfg.group_size)]
    start = time.perf_counter()
    with ranks.gathered(model):  # under FSDP: the full weights for the whole rollout
        samples = sample(model, tokenizer, [p.prompt for p in grouped], cfg.max_new_tokens, cfg.temperature,
                         batch_size=cfg.rollout_batch)
    seconds = time.perf_counter() - start
    rewards, errors = score(task.reward, samples.texts, [p.answer for p in grouped])
    if errors:
        print(f"iteration {iteration}: the reward function failed on {len(errors)} completions (scored 0): {errors[0]}")
    lengths = samples.completion_mask.sum(-1)  # [N]
    stats = {"reward": rewards.mean().item(), "reward_errors": len(errors),
             "empty_frac": sum(not t.strip() for t in samples.texts) / len(samples.texts),
             "response_len": lengths.float().mean().item(), "truncated_frac": samples.truncated.float().mean().item(),
             "gen_tokens_per_s": lengths.sum().item() / seconds, "sample_text": samples.texts[0]}
    return samples, rewards.to(samples.input_ids.device), stats


def rl_step(model, optimizer, batch: RolloutBatch, cfg: TrainConfig, logprobs=policy_logprobs, ranks=OneDevice(),
            off_policy=None, watch=None) -> dict:
    """One optimizer step on one mini-batch of whole groups, gradients accumulated over micro-batches.

    Each micro-batch's loss is scaled by its share of the mini-batch's loss denominator, so the scaled losses
    sum to the mini-batch's loss. A NaN/inf log-prob, loss or gradient skips the step, weights untouched.
    """
    loss_cfg = cfg.loss if cfg.loss.norm_len else replace(cfg.loss, norm_len=cfg.max_new_tokens)  # Dr. GRPO's divisor
    n, mask = len(batch.advantages), batch.completion_mask  # mask [B, C]
    denominator = loss_denominator(mask, loss_cfg.agg, loss_cfg.norm_len)
    logp_all, entropy_all = torch.zeros_like(batch.old_logp), torch.zeros_like(batch.old_logp)  # [B, C]
    phi_all = torch.zeros_like(batch.old_logp, dtype=compute_dtype(batch.old_logp))  # [B, C] the applied coefficient
    loss_total, aux_total = 0.0, None
    optimizer.zero_grad(set_to_none=True)
    for rows in torch.arange(n, device=mask.device).split(cfg.micro_batch or n):
        micro = batch.select(rows)
        width = micro.completion_mask.shape[1]
        logp, entropy, aux_loss = logprobs(model, micro, cfg.temperature, with_entropy=True)  # [b, c] log pi
        logp_all[rows, :width], entropy_all[rows, :width] = logp.detach(), entropy
        if not ranks.all_agree(torch.where(micro.completion_mask, logp.detach(), 0.0).isfinite().all()):
            return {"skipped": 1, "skip_reason": "non-finite log-prob"}
        # The method lives in this one call; everything around it is plain policy-gradient RL.
        loss, applied = policy_loss(logp, micro.old_logp, micro.advantages, micro.completion_mask, loss_cfg,
                                    pi_old_logp=micro.pi_old_logp)
        phi_all[rows, :width] = applied["phi"]
        share = loss_denominator(micro.completion_mask, loss_cfg.agg, loss_cfg.norm_len) / denominator.clamp(min=1)
        loss = loss * share * ranks.loss_factor(denominator)
        if aux_loss is not None:  # MoE: the router's load-balancing loss, logged always, trained on if asked
            aux_total = (aux_total or 0.0) + aux_loss.item() * len(rows) / n
            loss = loss + cfg.router_aux_coef * aux_loss * len(rows) / n if cfg.router_aux_coef else loss
        if not ranks.all_agree(loss.isfinite()):
            optimizer.zero_grad(set_to_none=True)
            return {"skipped": 1, "skip_reason": "non-finite loss"}
        loss.backward()
        loss_total += loss.item()
    # What to watch (docs/math.md §6): the weights' drift and what the coefficient kept, per advantage sign.
    against = batch.pi_old_logp if loss_cfg.weight_against == "pi_old" else batch.old_logp  # W's denominator
    stats = diagnostics(phi_all, logp_all, against, batch.advantages, mask, loss_cfg, cfg.group_size)
    if off_policy is not None:
        stats.update(off_policy.step_stats(logp_all, batch, loss_cfg))
    stats.update(loss=loss_total, entropy=entropy_all[mask].mean().item() if mask.any() else float("nan"))
    if aux_total is not None:
        stats["router_aux_loss"] = aux_total
    if watch is not None:  # a study's reader of every response (research/): it reads, never changes the step
        watch(batch, logp_all, phi_all)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
    if not grad_norm.isfinite():
        optimizer.zero_grad(set_to_none=True)
        return {**stats, "grad_norm": grad_norm.item(), "skipped": 1, "skip_reason": "non-finite gradient"}
    optimizer.step()
    return {**stats, "grad_norm": grad_norm.item(), "skipped": 0}


def rl_iteration(model, tokenizer, task, optimizer, cfg: TrainConfig, iteration: int, step: int,
                 logprobs=policy_logprobs, ranks=OneDevice(), off_policy=None, watch=None):
    """One rollout batch, then cfg.reuse = epochs x mini-batches optimizer steps on it: (batch, records, step).
    logprobs: the training forward (rollout.policy_logprobs, or an opt-in route to the same numbers)."""
    # 1. Sample, recording log mu of every sampled token, and reward.
    sampler = off_policy.sampler_for(model) if off_policy else model  # mu: the learner, or a lagged / cast copy
    samples, rewards, rollout_stats = collect_rollouts(sampler, tokenizer, task, cfg, iteration, ranks)
    # 2. Advantages: centred within each group of G samples of one prompt (docs/math.md §1).
    advantages, adv_stats = group_advantages(rewards, cfg.group_size, cfg.adv_scale)
    if adv_stats["zero_var_frac"] == 1.0:
        print(f"iteration {iteration}: every group has all-equal rewards, so this batch carries no signal")
    batch = RolloutBatch(samples.input_ids, samples.attention_mask, samples.completion_mask, samples.old_logp,
                         rewards, advantages.to(rewards.device))
    if off_policy is not None:  # pi_old, and what tells a separate sampler from the learner
        rollout_stats.update(off_policy.prepare(model, sampler, batch, cfg, logprobs))
    if cfg.loss.weight_against == "pi_old" and batch.pi_old_logp is None:
        batch.pi_old_logp = batch.old_logp  # the learner sampled, just before these updates: pi_old is mu
    # 3. Reuse: the same episodes feed cfg.reuse optimizer steps; from the second on, pi differs from mu.
    epochs, minibatches = reuse_split(cfg.reuse, cfg.epochs)
    records = []
    for epoch in range(epochs):
        order = torch.Generator().manual_seed(hash_seed("order", cfg.seed, iteration, epoch))
        for minibatch, rows in enumerate(minibatch_order(len(rewards) // cfg.group_size, cfg.group_size,
                                                         minibatches, order)):
            start = time.perf_counter()
            stats = rl_step(model, optimizer, batch.select(rows.to(rewards.device)), cfg, logprobs, ranks,
                            off_policy, watch)
            step += 1
            if stats["skipped"]:
                print(f"step {step}: skipped ({stats['skip_reason']}); weights and optimizer unchanged")
            tokens = batch.completion_mask[rows].sum().item()
            records.append({"kind": "train", "iteration": iteration, "step": step, "epoch": epoch,
                            "minibatch": minibatch, **stats, **rollout_stats,
                            "zero_var_frac": adv_stats["zero_var_frac"],
                            "train_tokens_per_s": tokens / (time.perf_counter() - start)})
    return batch, records, step


# --- set-up: the task, the model (warm start or checkpoint), the optimizer ------------------------------------

# Flags a --resume may change without changing what the run computes (a run directory may move).
RESUMABLE = {"iterations", "resume", "threads", "plots", "save_every", "keep_checkpoints", "device", "fsdp",
             "out_dir", "name", "sft_from_scratch"}


def routes_of(routes: RouteConfig):
    """(warm start's forward, RL's training forward): rollout.policy_logprobs unless a flag asks for a faster route
    to the same numbers (nano_respo/scale/, imported only when asked)."""
    logprobs = policy_logprobs
    if routes.logprob_chunk_mb is not None:
        from nano_respo.scale.logprobs import chunked_policy_logprobs
        logprobs = functools.partial(chunked_policy_logprobs, chunk_mb=routes.logprob_chunk_mb)
    rl_logprobs = functools.partial(logprobs, packed=True) if routes.packed_forward and routes.logprob_chunk_mb else logprobs
    if routes.packed_forward and routes.logprob_chunk_mb is None:
        from nano_respo.scale.packed import packed_policy_logprobs as rl_logprobs
    if routes.shared_prompts:
        from nano_respo.scale.shared_prompts import shared_prompt_policy_logprobs as rl_logprobs
    return logprobs, rl_logprobs


def off_policy_of(cfg: TrainConfig, model, kept=None):
    """A separate sampler (--lag, --sampler-dtype) and pi_old (--correction, --opsm-delta), or None (nano_respo/offpolicy.py)."""
    separate = cfg.lag or cfg.sampler_dtype != "float32"
    if not (separate or cfg.loss.correction != "none" or cfg.loss.opsm_delta is not None):
        return None
    from nano_respo.offpolicy import LaggedPolicy, OffPolicy
    return OffPolicy(LaggedPolicy(model, cfg.lag, kept, getattr(torch, cfg.sampler_dtype)) if separate else None)


def set_up(cfg: TrainConfig, run_dir: Path):
    """(task, model, tokenizer, optimizer, ranks, off_policy, iteration, step): the warm start, or the newest intact
    checkpoint of run_dir under --resume, with its optimizer and random state."""
    torch.set_num_threads(cfg.threads)
    task = make_task(cfg.task, cfg.task_size, cfg.eval_problems, cfg.heldout_file, seed=0)
    task.check_budget(cfg.max_new_tokens)
    if cfg.routes.fsdp:
        from nano_respo.scale import distributed
        device = str(distributed.check_split(cfg.prompts_per_iteration, reuse_split(cfg.reuse, cfg.epochs)[1]))
    else:
        device = resolve_device(cfg.device)
    if cfg.autocast and not device.startswith("cuda"):
        raise ValueError(f"autocast: bfloat16 autocast is for CUDA devices, not {device!r}")
    checkpoint, state = resume_point(run_dir, flat(cfg), cfg.resume, RESUMABLE)
    torch.manual_seed(cfg.seed)
    iteration, step = (state["iteration"], state["step"]) if state else (0, 0)
    if checkpoint is None:
        model, tokenizer = initial_model(cfg, task, device, routes_of(cfg.routes)[0])
    else:
        model, tokenizer = load_model(str(checkpoint), cfg.dtype, device, cfg.gradient_checkpointing)
        print(f"resume: continuing from iteration {iteration} of {cfg.iterations} ({checkpoint.name}, step {step})")
    apply_prompt_format(tokenizer, cfg.prompt_format)
    refuse_unknown_characters(tokenizer, (task.train_pool or []) + task.heldout_problems)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        set_rng_state(state["rng"])
    off_policy = off_policy_of(cfg, model, state and state.get("lagged_weights"))
    ranks = OneDevice()
    if cfg.routes.fsdp:  # join the process group and shard; the same loop runs on every rank
        model, optimizer, ranks = distributed.shard(model, optimizer, checkpoint, cfg.seed, iteration)
    return task, model, tokenizer, optimizer, ranks, off_policy, iteration, step


def save(run_dir, model, tokenizer, optimizer, iteration, step, cfg, ranks, off_policy) -> Path:
    """An atomic checkpoint (written aside, then renamed); under FSDP the full weights and every rank's shards."""
    if cfg.routes.fsdp:
        from nano_respo.scale.distributed import save_sharded
        return save_sharded(run_dir, model, tokenizer, optimizer, iteration, step, flat(cfg), ranks, cfg.keep_checkpoints)
    lagged = off_policy.lagged if off_policy else None
    return save_checkpoint(run_dir, model, tokenizer, iteration, step, flat(cfg), optimizer.state_dict(),
                           keep=cfg.keep_checkpoints, extra={"lagged_weights": list(lagged.kept)} if lagged else None)


# --- the run: iterations, held-out evaluation, checkpoints, metrics ------------------------------------------

def evaluate_heldout(model, tokenizer, task, cfg: TrainConfig, amp, ranks=OneDevice()) -> dict:
    """Greedy accuracy, pass@1 and pass@k on the held-out split (every rank samples, gathered, under FSDP)."""
    with amp, ranks.gathered(model):
        return evaluate(model, tokenizer, task, cfg.max_new_tokens, cfg.temperature, cfg.eval_samples,
                        batch_size=cfg.rollout_batch or 256)


def train(cfg: TrainConfig, watch=None) -> Path:
    """Run (or resume) training; returns the run directory. Ctrl-C or SIGTERM finishes the iteration, saves, and
    raises Stopped (exit 130 / 143); a second one stops at once. `watch`: see rl_step."""
    run_dir = Path(cfg.out_dir) / cfg.run_name
    if cfg.resume and not run_dir.is_dir():
        raise ValueError(f"resume: no run in {run_dir}; drop --resume to start it")
    run_dir.mkdir(parents=True, exist_ok=True)  # run_lock makes it too, but --fsdp's ranks take no lock
    with Stop(run_dir) as stop, contextlib.nullcontext() if cfg.routes.fsdp else run_lock(run_dir):
        if not cfg.routes.fsdp:  # what a save killed midway left behind (only the lock's holder may remove it)
            remove_temporary_checkpoints(run_dir)
        task, model, tokenizer, optimizer, ranks, off_policy, start, step = set_up(cfg, run_dir)
        amp = torch.autocast("cuda", dtype=torch.bfloat16) if cfg.autocast else contextlib.nullcontext()
        logprobs = routes_of(cfg.routes)[1]
        log = MetricsLog(run_dir, keep_until_iteration=start if cfg.resume else None, write=ranks.rank == 0)
        if ranks.rank == 0:
            (run_dir / "config.json").write_text(json.dumps(flat(cfg), indent=1))
        heldout = log.last_eval() if start else None
        if heldout is None:
            heldout = {"iteration": start, **evaluate_heldout(model, tokenizer, task, cfg, amp, ranks)}
            log.write({"kind": "eval", "step": step, **heldout})
        print(f"run: {run_dir}  start held-out pass@1 {heldout['heldout_pass@1']:.3f}")
        done = start
        for iteration in progress(range(start, cfg.iterations), stop, lambda: heldout["heldout_pass@1"]):
            began = time.perf_counter()
            model.train()
            for group in optimizer.param_groups:  # a function of the iteration, so a resumed run sets the same
                group["lr"] = cfg.lr_at(iteration)
            with amp:
                _, records, step = rl_iteration(model, tokenizer, task, optimizer, cfg, iteration, step,
                                                logprobs, ranks, off_policy, watch)
            lag = {"policy_lag": off_policy.lagged.lag_now} if off_policy and off_policy.lagged else {}
            for record in records:
                log.write({**record, **lag})
            log.write({"kind": "time", "iteration": iteration, "step": step,
                       "iteration_s": time.perf_counter() - began})
            done = iteration + 1
            if done % cfg.eval_every == 0 or done == cfg.iterations:
                heldout = {"iteration": done, **evaluate_heldout(model, tokenizer, task, cfg, amp, ranks)}
                log.write({"kind": "eval", "step": step, **heldout})
            if done % cfg.save_every == 0 or done == cfg.iterations or stop.signum:
                save(run_dir, model, tokenizer, optimizer, done, step, cfg, ranks, off_policy)
        log.close()
        when = "" if heldout["iteration"] == done else f" (evaluated at iteration {heldout['iteration']})"
        print(f"end held-out pass@1 {heldout['heldout_pass@1']:.3f} (greedy accuracy {heldout['heldout_acc']:.3f})"
              f"{when}, after {done} iterations, {step} optimizer steps")
        if cfg.plots and ranks.rank == 0:
            print(f"plots: {write_plots(run_dir)}")
        print(f"metrics: {run_dir / 'metrics.jsonl'}")
    if stop.signum and done < cfg.iterations:  # saved, yet stopped short: exit with the signal's status
        raise Stopped(f"stopped after iteration {done} of {cfg.iterations}; `--resume` continues", stop.signum)
    return run_dir


def main(argv=None) -> Path:
    choices = {"method": tuple(METHOD_TABLE), "agg": AGG_MODES, "weight_against": WEIGHT_AGAINST}
    cfg = parse_config(TrainConfig, argv, first=FIRST_FLAGS, presets=PROTOCOLS, choices=choices, epilog=EXAMPLES)
    from transformers.utils import logging
    logging.disable_progress_bar()
    return train(cfg)


if __name__ == "__main__":
    run_command(main)

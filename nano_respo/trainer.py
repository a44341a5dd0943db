"""The single-device RLVR loop with explicit rollout reuse.

    for each iteration:
        sample G completions for each of P prompts, recording log mu     (rollout.sample)
        reward, group advantages                                          (kernel)
        reuse = epochs x mini-batches optimizer steps on this batch       (rl_step)
        log; every eval_every iterations evaluate held-out; every save_every checkpoint

`rl_step` (one optimizer step on one mini-batch) and `rollout.policy_logprobs` are the
pieces a distributed trainer reuses; everything else is bookkeeping.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from .checkpoint import latest_checkpoint, load_trainer_state, save_checkpoint, set_rng_state
from .distributed import FSDPRun, has_sharded_state, load_sharded, loss_scale, on_every_rank
from .evaluation import evaluate
from .kernel import SCALES, LossConfig, group_advantages, policy_loss
from .models import TINY_WARM_START_STEPS, load_model
from .rollout import RolloutBatch, eos_ids_of, policy_logprobs, sample, score
from .sft import hash_seed, warm_start
from .tasks import make_task


@dataclass
class TrainConfig(LossConfig):
    """Train a Qwen3 (tiny offline default, or any hub id / local dir) with RLVR and rollout reuse."""

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
    prompts_per_iteration: int = 32
    """Prompts per rollout batch (P); the batch holds P x group_size episodes."""
    group_size: int = 8
    """Completions sampled per prompt (G); advantages are centred within each group."""
    reuse: int = 4
    """Optimizer steps per rollout batch (epochs x mini-batches); 1 = on-policy."""
    epochs: int = 2
    """Passes over each rollout batch; mini-batches per pass = reuse / epochs."""
    max_new_tokens: int = 16
    """Generation budget; a completion without EOS within it is truncated (and usually wrong)."""
    temperature: float = 1.0
    """Sampling temperature; the training forward divides logits by the same value so w = 1 on a fresh batch."""
    adv_scale: str = "none"
    """Group advantage scaling: none (A = r - group mean) or std (also divide by the group std, as GRPO)."""
    lr: float = 3e-4
    """AdamW learning rate for RL (constant)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradient clipping threshold (total L2 norm)."""
    router_aux_coef: float = 0.0
    """MoE only: coefficient of the router load-balancing loss added to the policy loss (always logged)."""
    sft_steps: int | None = None
    """Warm-start SFT steps before RL (cached); None = 200 for tiny-qwen3, 95 for tiny-qwen3-moe, 0 otherwise."""
    sft_batch: int = 64
    """Warm-start batch size (demonstrations per step)."""
    sft_lr: float = 3e-3
    """Warm-start AdamW learning rate."""
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
    seed: int = 0
    """Seed of sampling, mini-batch order and the task's training problems."""
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
    rollout_batch: int | None = None
    """Sequences per generate call (bounds the KV cache); None = the whole rollout batch at once."""
    micro_batch: int | None = None
    """Sequences per forward/backward; gradients accumulate over a mini-batch. None = the whole mini-batch."""
    logprob_chunk_mb: float | None = None
    """MB of float32 logits the log-prob routine holds at once; None = 16 on a CPU, 256 on a GPU."""
    plots: bool = True
    """Write plots.png at the end."""
    fsdp: bool = False
    """Shard the model with FSDP2 over torchrun's processes: torchrun --nproc_per_node N train.py --fsdp."""

    def __post_init__(self):
        super().__post_init__()
        if not self.model.strip():
            raise ValueError("model: empty model name")
        for name in ("iterations", "prompts_per_iteration", "group_size", "reuse", "epochs", "max_new_tokens",
                     "sft_batch", "eval_every", "eval_problems", "eval_samples", "save_every", "threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        for name in ("micro_batch", "rollout_batch", "logprob_chunk_mb"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.sft_steps is not None and self.sft_steps < 0:
            raise ValueError(f"sft_steps: must be >= 0, got {self.sft_steps}")
        if self.reuse % self.epochs:
            raise ValueError(f"reuse: {self.reuse} optimizer steps do not split into {self.epochs} epochs")
        episodes = self.prompts_per_iteration * self.group_size
        if episodes % self.minibatches:
            raise ValueError(f"reuse: {episodes} episodes (prompts_per_iteration x group_size) do not split "
                             f"into {self.minibatches} mini-batches (reuse / epochs)")
        if self.temperature <= 0:
            raise ValueError(f"temperature: must be > 0, got {self.temperature}")
        if self.adv_scale not in SCALES:
            raise ValueError(f"adv_scale: unknown scale {self.adv_scale!r}; choose one of {', '.join(SCALES)}")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"dtype: choose float32, bfloat16 or float16, got {self.dtype!r}")
        if self.lr <= 0 or self.sft_lr <= 0 or self.max_grad_norm <= 0:
            raise ValueError("lr, sft_lr, max_grad_norm: must be > 0")

    @property
    def minibatches(self) -> int:
        return self.reuse // self.epochs

    @property
    def run_name(self) -> str:
        return self.name or f"{self.task.rsplit('/', 1)[-1].removesuffix('.jsonl')}-{self.method}-reuse{self.reuse}-seed{self.seed}"

    def loss_config(self) -> LossConfig:
        shared = {f.name: getattr(self, f.name) for f in dataclasses.fields(LossConfig)}
        # Dr. GRPO's constant divisor: the generation budget, so every mini-batch divides alike.
        shared["norm_len"] = self.norm_len or self.max_new_tokens
        return LossConfig(**shared)


# Config fields a --resume may change without changing what the run computes.
RESUMABLE = {"iterations", "resume", "threads", "plots", "save_every", "device", "fsdp"}


def micro_share(mask: torch.Tensor, full_mask: torch.Tensor, agg: str) -> float:
    """The part of the mini-batch loss's normaliser a micro-batch holds: scaled micro losses sum to the full loss."""
    if agg == "token-mean":
        return mask.sum().item() / max(1, full_mask.sum().item())
    return (mask.sum(-1) > 0).sum().item() / max(1, (full_mask.sum(-1) > 0).sum().item())


def rl_step(model, optimizer, batch: RolloutBatch, cfg: TrainConfig, loss_cfg: LossConfig) -> dict:
    """One optimizer step on one mini-batch, gradients accumulated over micro-batches of cfg.micro_batch.

    A NaN/inf log-prob, loss or gradient skips the step: weights and optimizer state stay untouched
    (under FSDP on every rank together: the gradient norm is global, the other two are agreed on).
    The logged statistics are those of the whole mini-batch (loss_cfg.norm_len must be set, so
    that every micro-batch divides by the same constant).
    """
    n = len(batch.advantages)
    full_mask = batch.completion_mask  # [B, C]
    logp_all = torch.zeros_like(batch.old_logp)  # [B, C] detached, for the mini-batch statistics
    entropy_all = torch.zeros_like(batch.old_logp)  # [B, C]
    loss_total, aux_total = 0.0, None
    optimizer.zero_grad(set_to_none=True)
    for index in torch.arange(n, device=full_mask.device).split(cfg.micro_batch or n):
        micro = batch.select(index)
        width = micro.completion_mask.shape[1]
        (logp, entropy), aux_loss = policy_logprobs(model, micro, cfg.temperature, cfg.logprob_chunk_mb,
                                                    with_entropy=True)  # [b, c]
        logp_all[index, :width], entropy_all[index, :width] = logp.detach(), entropy
        if not on_every_rank(torch.where(micro.completion_mask, logp.detach(), 0.0).isfinite().all()):
            optimizer.zero_grad(set_to_none=True)
            return {"skipped": 1, "skip_reason": "non-finite log-prob"}
        loss, _ = policy_loss(logp, micro.old_logp, micro.advantages, micro.completion_mask, loss_cfg)
        loss = loss * micro_share(micro.completion_mask, full_mask, loss_cfg.agg) * loss_scale(full_mask, loss_cfg)
        if aux_loss is not None:
            aux_total = (aux_total or 0.0) + aux_loss.item() * len(index) / n
            if cfg.router_aux_coef:
                loss = loss + cfg.router_aux_coef * aux_loss * len(index) / n
        if not on_every_rank(loss.isfinite()):
            optimizer.zero_grad(set_to_none=True)
            return {"skipped": 1, "skip_reason": "non-finite loss"}
        loss.backward()
        loss_total += loss.item()
    _, stats = policy_loss(logp_all, batch.old_logp, batch.advantages, full_mask, loss_cfg)
    stats.update(loss=loss_total, entropy=entropy_all[full_mask].mean().item() if full_mask.any() else float("nan"))
    if aux_total is not None:
        stats["router_aux_loss"] = aux_total
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
    if not grad_norm.isfinite():
        optimizer.zero_grad(set_to_none=True)
        return {**stats, "grad_norm": grad_norm.item(), "skipped": 1, "skip_reason": "non-finite gradient"}
    optimizer.step()
    return {**stats, "grad_norm": grad_norm.item(), "skipped": 0}


def collect_rollouts(model, tokenizer, task, cfg: TrainConfig, iteration: int):
    """(RolloutBatch, rollout stats) for one iteration: P prompts x G samples, scored, with advantages."""
    problems = task.train_batch(cfg.prompts_per_iteration, seed=hash_seed("rl", cfg.seed, iteration))
    grouped = [p for p in problems for _ in range(cfg.group_size)]
    start = time.perf_counter()
    input_ids, attention_mask, completion_mask, old_logp, texts = sample(
        model, tokenizer, [p.prompt for p in grouped], cfg.max_new_tokens, cfg.temperature,
        batch_size=cfg.rollout_batch)
    gen_seconds = time.perf_counter() - start
    rewards, reward_errors = score(task.reward, texts, grouped)
    if reward_errors:
        tqdm.write(f"iteration {iteration}: the reward function failed on {len(reward_errors)} of {len(texts)} "
                   f"completions (scored 0); first: {reward_errors[0]}")
    advantages, adv_stats = group_advantages(rewards, cfg.group_size, cfg.adv_scale)
    lengths = completion_mask.sum(-1).float()  # [N]
    eos_ids = torch.tensor(eos_ids_of(tokenizer, model), device=input_ids.device)
    last = input_ids[:, -completion_mask.shape[1]:].gather(1, (lengths.long() - 1).clamp(min=0)[:, None])  # [N, 1]
    truncated = ~torch.isin(last.squeeze(1), eos_ids)  # [N] no EOS within the budget
    device = input_ids.device
    batch = RolloutBatch(input_ids, attention_mask, completion_mask, old_logp,
                         rewards.to(device), advantages.to(device))
    if adv_stats["zero_var_frac"] == 1.0:
        tqdm.write(f"iteration {iteration}: every group has all-equal rewards, so this batch carries no signal")
    stats = {"reward": rewards.mean().item(), "reward_errors": len(reward_errors),
             "empty_frac": sum(not t.strip() for t in texts) / len(texts),
             "response_len": lengths.mean().item(), "truncated_frac": truncated.float().mean().item(),
             "zero_var_frac": adv_stats["zero_var_frac"],
             "gen_tokens_per_s": lengths.sum().item() / gen_seconds, "sample_text": texts[0]}
    return batch, stats


def minibatch_order(n: int, cfg: TrainConfig, iteration: int, epoch: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(hash_seed("order", cfg.seed, iteration, epoch))
    return list(torch.randperm(n, generator=generator).chunk(cfg.minibatches))


def reuse_batch(model, optimizer, batch: RolloutBatch, rollout_stats: dict, cfg: TrainConfig,
                loss_cfg: LossConfig, iteration: int, step: int, log) -> int:
    """The reuse loop: epochs x mini-batches optimizer steps on one rollout batch; returns the step count."""
    for epoch in range(cfg.epochs):
        for minibatch, index in enumerate(minibatch_order(len(batch.rewards), cfg, iteration, epoch)):
            start = time.perf_counter()
            stats = rl_step(model, optimizer, batch.select(index.to(batch.rewards.device)), cfg, loss_cfg)
            step += 1
            if stats["skipped"]:
                tqdm.write(f"step {step}: skipped ({stats['skip_reason']}); weights and optimizer unchanged")
            tokens = batch.completion_mask[index].sum().item()
            log.write({"kind": "train", "iteration": iteration, "step": step, "epoch": epoch,
                       "minibatch": minibatch, **stats, **rollout_stats,
                       "train_tokens_per_s": tokens / (time.perf_counter() - start)})
    return step


class StopRequest:
    """First Ctrl-C: finish the current iteration, checkpoint, stop. Second: stop at once."""

    def __init__(self):
        self.requested = False
        self.previous = signal.getsignal(signal.SIGINT)

    def __enter__(self):
        try:
            signal.signal(signal.SIGINT, self.handle)
        except ValueError:  # not the main thread: Ctrl-C keeps its default meaning
            pass
        return self

    def handle(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        tqdm.write("Ctrl-C: finishing this iteration, then saving a checkpoint (Ctrl-C again to abort)")

    def __exit__(self, *exc):
        try:
            signal.signal(signal.SIGINT, self.previous)
        except ValueError:
            pass


def resolve_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device: {name!r} requested but CUDA is not available")
    return name


def build_task(cfg: TrainConfig):
    return make_task(cfg.task, cfg.task_size, cfg.eval_problems, cfg.heldout_file, seed=0)


def initial_model(cfg: TrainConfig, task, device: str):
    sft_steps = cfg.sft_steps if cfg.sft_steps is not None else TINY_WARM_START_STEPS.get(cfg.model, 0)
    if sft_steps == 0:
        return load_model(cfg.model, cfg.dtype, device, cfg.gradient_checkpointing)
    task_key = {"task": cfg.task, "task_size": cfg.task_size}
    model, tokenizer = warm_start(cfg.model, task, task_key, sft_steps, cfg.sft_batch, cfg.sft_lr, cfg.sft_seed,
                                  cfg.dtype, device, cfg.logprob_chunk_mb)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model, tokenizer


def train(cfg: TrainConfig) -> Path:
    """Run (or resume) training; returns the run directory."""
    from .metrics import MetricsLog, write_plots

    torch.set_num_threads(cfg.threads)
    device = resolve_device(cfg.device)
    # ---- FSDP (torchrun --nproc_per_node N train.py --fsdp), part 1 of 2: this process's device -----
    fsdp = FSDPRun(cfg) if cfg.fsdp else None
    device = str(fsdp.device) if fsdp else device
    # -----------------------------------------------------------------------------------------------
    if cfg.autocast and not device.startswith("cuda"):
        raise ValueError(f"autocast: bfloat16 autocast is for CUDA devices, not {device!r}")
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if cfg.autocast else contextlib.nullcontext()
    run_dir = Path(cfg.out_dir) / cfg.run_name
    task = build_task(cfg)
    config = dataclasses.asdict(cfg)
    checkpoint = latest_checkpoint(run_dir) if cfg.resume else None
    if cfg.resume and checkpoint is None:
        raise ValueError(f"resume: no checkpoint in {run_dir}")
    if not cfg.resume and (run_dir / "metrics.jsonl").exists():
        raise ValueError(f"name: {run_dir} already holds a run; pass --resume or another --name")
    torch.manual_seed(cfg.seed)
    if checkpoint is None:
        model, tokenizer = initial_model(cfg, task, device)
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
    loss_cfg = cfg.loss_config()
    log = MetricsLog(run_dir, keep_until_iteration=iteration if checkpoint else None)
    (run_dir / "config.json").write_text(json.dumps(config, indent=1))
    # ---- FSDP, part 2 of 2: join the group, shard; everything below runs unchanged on every rank --
    if fsdp:
        model, optimizer, task, log = fsdp.wrap(model, optimizer, task, log, checkpoint, iteration)
    elif checkpoint is not None and has_sharded_state(checkpoint):
        load_sharded(checkpoint, model, optimizer)  # an FSDP run's checkpoint, resumed on one device
    save = fsdp.save_checkpoint if fsdp else save_checkpoint
    # -----------------------------------------------------------------------------------------------

    def run_eval():
        with amp:
            figures = evaluate(model, tokenizer, task, cfg.max_new_tokens, cfg.temperature, cfg.eval_samples,
                               batch_size=cfg.rollout_batch or 256)
        log.write({"kind": "eval", "iteration": iteration, "step": step, **figures})
        return figures

    if checkpoint is None:
        last_eval = run_eval()
    else:
        last_eval = log.last_eval() or run_eval()
    print(f"run: {run_dir}  start held-out accuracy {last_eval['heldout_acc']:.3f}")
    bar = tqdm(range(iteration, cfg.iterations), initial=iteration, total=cfg.iterations, desc="rl",
               dynamic_ncols=True)
    with StopRequest() as stop:
        for iteration in bar:
            model.train()
            start = time.perf_counter()
            with amp:
                batch, rollout_stats = collect_rollouts(model, tokenizer, task, cfg, iteration)
                step = reuse_batch(model, optimizer, batch, rollout_stats, cfg, loss_cfg, iteration, step, log)
            done = iteration + 1
            log.write({"kind": "time", "iteration": iteration, "step": step,
                       "iteration_s": time.perf_counter() - start})
            iteration = done
            if done % cfg.eval_every == 0 or done == cfg.iterations:
                last_eval = run_eval()
            bar.set_postfix(reward=f"{rollout_stats['reward']:.2f}", heldout=f"{last_eval['heldout_acc']:.2f}")
            if done % cfg.save_every == 0 or done == cfg.iterations or stop.requested:
                save(run_dir, model, tokenizer, optimizer, done, step, config)
            if stop.requested:
                break
    bar.close()
    log.close()
    print(f"end held-out accuracy {last_eval['heldout_acc']:.3f} "
          f"(pass@1 {last_eval['heldout_pass@1']:.3f}) after {iteration} iterations, {step} optimizer steps")
    if cfg.plots:
        print(f"plots: {write_plots(run_dir)}")
    print(f"metrics: {run_dir / 'metrics.jsonl'}\ncheckpoint: {latest_checkpoint(run_dir)}")
    return run_dir

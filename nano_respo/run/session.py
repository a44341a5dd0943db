"""What keeps a training run alive around the loop of run/loop.py: one call, `open_run`, opens it.

    open_run(cfg)   the task built and its files checked, the run directory locked (one process owns it),
                    Ctrl-C and SIGTERM caught, the model warm-started or resumed with its optimizer,
                    RNG and lagged weights, the start evaluated and printed
    run.log / run.evaluate / run.save          what the loop calls; saves are atomic
    leaving the with-block                     the end printed, plots.png written

Under torchrun --fsdp every rank opens the same run and shards the model (scale.distributed).
"""

from __future__ import annotations

import contextlib
import functools
import json
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from tqdm import tqdm

from ..checkpoint import (is_sharded, latest_checkpoint, load_trainer_state, newest_intact_checkpoint,
                          remove_temporary_checkpoints, save_checkpoint, set_rng_state)
from ..config import TrainConfig
from ..evaluation import evaluate
from ..models import (TINY_WARM_START_STEPS, apply_prompt_format, load_model, refuse_unknown_characters,
                      resolve_device)
from ..rollout import decode, policy_logprobs
from ..sft import warm_start
from ..tasks import make_task, mixed_task
from .cli import flat, flat_fields
from .metrics import MetricsLog, write_plots
from .runlock import run_lock
from .terminal import signal_name, stopped_status

if TYPE_CHECKING:
    from ..offpolicy import LaggedPolicy, OffPolicy

# Config fields a --resume may change without changing what the run computes; a run
# directory may be moved or renamed, so its location is one of them.
RESUMABLE = {"iterations", "resume", "threads", "plots", "save_every", "keep_checkpoints", "device", "fsdp",
             "out_dir", "name", "sft_from_scratch"}
# What a run computed before a flag existed, for a checkpoint that does not record it: the routes that are the
# default now were off then.
BEFORE_THE_FLAG = {"shared_prompts": False, "lean_sampler": False}


class Stopped(KeyboardInterrupt):
    """A run stopped by a signal, at once or after saving; train.py prints its one line and exits with
    128 + the signal's number, as a shell does for a killed process (run/terminal.py)."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_code = stopped_status(signum)


class StopRequest:
    """Ctrl-C (SIGINT), SIGTERM (what schedulers and `docker stop` send), a closed terminal (SIGHUP) and an
    exited reader of the output (SIGPIPE: `| tee log` ended by the same Ctrl-C), from start-up to exit.

    Inside the RL loop (`finish_iteration` set) the first one finishes the current iteration,
    saves a checkpoint and stops, and `open_run` then raises Stopped with the signal's status.
    Anywhere else (loading, the warm start, the first evaluation), and a second Ctrl-C or SIGTERM
    in the loop, raise Stopped at once: saves are atomic, so stopping mid-way damages nothing,
    and the message says what --resume continues from. A lost terminal or pipe signals again at
    each write to it, so SIGHUP and SIGPIPE never count as asking twice; a run started under
    nohup keeps SIGHUP ignored.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE)
    LOST_OUTPUT = (signal.SIGHUP, signal.SIGPIPE)

    def __init__(self, run_dir: Path | None = None):
        self.run_dir = run_dir
        self.finish_iteration = False
        self.requested = False
        self.signum: int | None = None  # the signal that asked the loop to stop
        self.stopping = False
        self.previous = {sig: signal.getsignal(sig) for sig in self.SIGNALS}

    def __enter__(self):
        try:
            for sig in self.SIGNALS:
                if not (sig == signal.SIGHUP and self.previous[sig] == signal.SIG_IGN):
                    signal.signal(sig, self.handle)
        except ValueError:  # not the main thread: the signals keep their default meaning
            pass
        return self

    def handle(self, signum, frame):
        name = signal_name(signum)
        if self.stopping:  # already unwinding: let the clean-up (the run lock) finish
            return
        if self.finish_iteration and (not self.requested or signum in self.LOST_OUTPUT):
            if not self.requested:
                self.requested, self.signum = True, signum
                again = "Ctrl-C" if signum in self.LOST_OUTPUT else f"{name} again"
                tqdm.write(f"{name}: finishing this iteration, then saving a checkpoint ({again} to stop at once)")
            return
        self.stopping = True
        again = " again" if self.requested and signum == self.signum else ""
        raise Stopped(f"{name}{again}: stopped at once; {self.resume_hint()}", signum)

    def stopped_after_saving(self, iteration: int, iterations: int) -> Stopped:
        """What open_run raises once a requested stop has finished its iteration and saved."""
        return Stopped(f"{signal_name(self.signum)}: stopped after iteration {iteration} of {iterations}; "
                       f"{self.resume_hint()}", self.signum)

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
    task = make_task(cfg.task, cfg.task_size, cfg.eval_problems, cfg.heldout_file, seed=0)
    task.check_budget(cfg.max_new_tokens)
    return task


def initial_model(cfg: TrainConfig, task, device: str, logprobs=policy_logprobs):
    """(model, tokenizer) where RL starts: the tiny models' warm start (shipped, cached or trained), else the model as loaded."""
    sft_steps = cfg.sft_steps if cfg.sft_steps is not None else TINY_WARM_START_STEPS.get(cfg.model, 0)
    if sft_steps == 0:
        return load_model(cfg.model, cfg.dtype, device, cfg.gradient_checkpointing)
    # A smaller size draws from the same training split (held-out prompts are excluded by hash).
    sft_task = task if cfg.sft_task_size is None else make_task(cfg.task, cfg.sft_task_size, cfg.eval_problems,
                                                                cfg.heldout_file, seed=0)
    if cfg.sft_full_share:
        sft_task = mixed_task(sft_task, task, cfg.sft_full_share)
    task_key = {"task": cfg.task, "task_size": cfg.sft_task_size or cfg.task_size,
                **({"full_share": cfg.sft_full_share} if cfg.sft_full_share else {})}
    model, tokenizer = warm_start(cfg.model, sft_task, task_key, sft_steps, cfg.sft_batch, cfg.sft_lr, cfg.sft_seed,
                                  cfg.dtype, device, logprobs, cfg.sft_label_smoothing, cfg.sft_anneal,
                                  shipped=not cfg.sft_from_scratch)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model, tokenizer


def evaluate_heldout(model, tokenizer, task, cfg: TrainConfig, amp, ranks=None) -> dict:
    """Held-out accuracy, pass@1, pass@k (every rank evaluates under FSDP: sampling runs gathered)."""
    with amp, ranks.gathered(model) if ranks else contextlib.nullcontext():
        return evaluate(model, tokenizer, task, cfg.max_new_tokens, cfg.temperature, cfg.eval_samples,
                        batch_size=cfg.rollout_batch or 256)


def heldout_line(result: dict) -> str:
    return f"held-out pass@1 {result['heldout_pass@1']:.3f} (greedy accuracy {result['heldout_acc']:.3f})"


@dataclass
class Run:
    """An open run: what train()'s loop reads (model, optimizer, task, how to sample) and advances (step)."""
    cfg: TrainConfig
    dir: Path
    task: object
    model: torch.nn.Module
    tokenizer: object
    optimizer: torch.optim.Optimizer
    stop: StopRequest
    metrics: MetricsLog
    config: dict
    iteration: int
    step: int
    amp: contextlib.AbstractContextManager
    logprobs: object
    decoder: object
    ranks: object | None  # scale.distributed.Ranks under --fsdp; None on one device
    off_policy: OffPolicy | None  # a separate sampler and pi_old (nano_respo/offpolicy.py), when the flags ask
    last_eval: dict | None = None
    reward: float = float("nan")

    def iterations(self):
        """The iterations still to run, under a progress bar; stops after the one a stop request came in."""
        bar = tqdm(range(self.iteration, self.cfg.iterations), initial=self.iteration, total=self.cfg.iterations,
                   desc="rl", dynamic_ncols=True)
        self.stop.finish_iteration = True
        for iteration in bar:
            yield iteration
            bar.set_postfix(reward=f"{self.reward:.2f}", heldout=f"{self.last_eval['heldout_pass@1']:.2f}")
            if self.stop.requested:
                break
        self.stop.finish_iteration = False
        bar.close()

    def log(self, iteration: int, records: list[dict], seconds: float) -> None:
        for record in records:
            self.metrics.write({**record, "policy_lag": self.lagged.lag_now} if self.lagged else record)
        self.reward = records[-1]["reward"]
        self.metrics.write({"kind": "time", "iteration": iteration, "step": self.step, "iteration_s": seconds})

    @property
    def lagged(self) -> LaggedPolicy | None:
        return self.off_policy.lagged if self.off_policy else None

    def evaluate(self, done: int) -> None:
        figures = evaluate_heldout(self.model, self.tokenizer, self.task, self.cfg, self.amp, self.ranks)
        self.last_eval = {"iteration": done, **figures}  # as metrics.jsonl's eval record, which a resume reads
        self.metrics.write({"kind": "eval", "iteration": done, "step": self.step, **figures})

    def save(self, done: int) -> Path:
        self.iteration = done
        return save_checkpoint_of(self.dir, self.model, self.tokenizer, self.optimizer, done, self.step, self.config,
                                  self.ranks, self.cfg.keep_checkpoints, self.lagged)

    def finish(self) -> None:
        self.metrics.close()
        print(f"end {heldout_line(self.last_eval)}{self.evaluated_when()}, "
              f"after {self.iteration} iterations, {self.step} optimizer steps")
        if self.cfg.plots and (self.ranks is None or self.ranks.rank == 0):
            print(f"plots: {write_plots(self.dir)}")
        print(f"metrics: {self.dir / 'metrics.jsonl'}\ncheckpoint: {latest_checkpoint(self.dir)}")

    def evaluated_when(self) -> str:
        """Where the end's figures come from, when not the last iteration (a stop between evaluations)."""
        evaluated = self.last_eval["iteration"]
        return "" if evaluated == self.iteration else f" (evaluated at iteration {evaluated})"


def save_checkpoint_of(run_dir: Path, model, tokenizer, optimizer, iteration: int, step: int, config: dict, ranks,
                       keep: int = 2, lagged: LaggedPolicy | None = None) -> Path:
    """An atomic checkpoint of the run's state; under FSDP the full weights, and every rank's shards."""
    if ranks is None:
        extra = {"lagged_weights": list(lagged.kept)} if lagged else {}
        return save_checkpoint(run_dir, model, tokenizer, iteration, step, config, optimizer.state_dict(),
                               keep=keep, extra=extra)
    from ..scale.distributed import checkpoint_state

    model_state, optimizer_state, write_shards = checkpoint_state(model, optimizer)
    return save_checkpoint(run_dir, model, tokenizer, iteration, step, config, optimizer_state,
                           model_state=model_state, payload=write_shards, ranks=ranks, keep=keep)


@contextlib.contextmanager
def open_run(cfg: TrainConfig):
    """The run of cfg, opened (or resumed) and locked for the with-block; bad arguments were refused by cfg."""
    task = build_task(cfg)  # data files checked before the run directory is touched
    run_dir = Path(cfg.out_dir) / cfg.run_name
    if cfg.resume and not run_dir.is_dir():
        raise ValueError(f"resume: no checkpoint in {run_dir}, and no run was started there; drop --resume to start it")
    with StopRequest(run_dir) as stop, contextlib.nullcontext() if cfg.fsdp else run_lock(run_dir):
        if not cfg.fsdp:
            remove_temporary_checkpoints(run_dir)
        run = start(cfg, run_dir, task, stop)
        yield run
        run.finish()
    if stop.requested and run.iteration < cfg.iterations:  # saved, yet stopped short: its signal's status
        raise stop.stopped_after_saving(run.iteration, cfg.iterations)


def routes(cfg: TrainConfig):
    """(warm start's log-prob route, RL's log-prob route, RL's decode loop): the systems flags' choice, never the
    numbers (tests/step/test_less_work.py). Each route of scale/ is imported only in its own branch."""
    logprobs = policy_logprobs
    if cfg.logprob_chunk_mb is not None:  # large vocabularies only: the chunked routine
        from ..scale.logprobs import chunked_policy_logprobs
        logprobs = functools.partial(chunked_policy_logprobs, chunk_mb=cfg.logprob_chunk_mb)
    rl_logprobs = logprobs
    if cfg.shared_prompt_forward:  # a route of its own (TrainConfig refuses it beside the two below)
        from ..scale.shared_prompts import shared_prompt_policy_logprobs
        rl_logprobs = shared_prompt_policy_logprobs
    elif cfg.packed_forward and cfg.logprob_chunk_mb is not None:
        rl_logprobs = functools.partial(logprobs, packed=True)
    elif cfg.packed_forward:
        from ..scale.packed import packed_policy_logprobs
        rl_logprobs = packed_policy_logprobs
    decoder = decode
    if cfg.lean_sampler:
        from ..scale.lean_sampler import decode_lean
        decoder = decode_lean
    return logprobs, rl_logprobs, decoder


def off_policy_of(cfg: TrainConfig, model, kept: list[dict] | None):
    """The step's OffPolicy when a flag makes the data off-policy from the start or asks for pi_old, else None."""
    separate = cfg.lag or cfg.sampler_dtype != "float32"  # a sampler other than the learner itself
    if not (separate or cfg.loss.correction != "none" or cfg.loss.opsm_delta is not None):
        return None
    from ..offpolicy import LaggedPolicy, OffPolicy

    return OffPolicy(LaggedPolicy(model, cfg.lag, kept, getattr(torch, cfg.sampler_dtype)) if separate else None)


def start(cfg: TrainConfig, run_dir: Path, task, stop: StopRequest) -> Run:
    """Model, optimizer and counters from a fresh start or the newest intact checkpoint; the start evaluated."""
    torch.set_num_threads(cfg.threads)
    if cfg.fsdp:  # torchrun --nproc_per_node N train.py --fsdp: this process's device
        from ..scale import distributed
        device = str(distributed.check_split(cfg.prompts_per_iteration, cfg.minibatches))
    else:
        device = resolve_device(cfg.device)
    if cfg.autocast and not device.startswith("cuda"):
        raise ValueError(f"autocast: bfloat16 autocast is for CUDA devices, not {device!r}")
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if cfg.autocast else contextlib.nullcontext()
    sft_logprobs, logprobs, decoder = routes(cfg)
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
    state = None
    if checkpoint is None:
        model, tokenizer = initial_model(cfg, task, device, sft_logprobs)
        iteration, step = 0, 0
    else:
        state = load_trainer_state(checkpoint)
        # A flag newer than the checkpoint is read as the run ran without it: BEFORE_THE_FLAG, else its default.
        defaults = {name: f.default for name, (f, _, _) in flat_fields(TrainConfig).items()} | BEFORE_THE_FLAG
        ran = {k: state["config"].get(k, defaults.get(k)) for k in config}
        changed = sorted(k for k in config if k not in RESUMABLE and ran[k] != config[k])
        if changed:
            hint = " ".join(f"--{'' if ran[k] else 'no-'}{k.replace('_', '-')}" for k in changed
                            if isinstance(ran[k], bool))
            raise ValueError(f"resume: flags differ from the checkpoint's run: {', '.join(changed)}"
                             + (f" (it ran with {hint})" if hint else ""))
        model, tokenizer = load_model(str(checkpoint), cfg.dtype, device, cfg.gradient_checkpointing)
        iteration, step = state["iteration"], state["step"]
        print(f"resume: continuing from iteration {iteration} of {cfg.iterations} ({checkpoint.name}, "
              f"optimizer step {step})")
    apply_prompt_format(tokenizer, cfg.prompt_format)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        set_rng_state(state["rng"])
    off_policy = off_policy_of(cfg, model, state and state.get("lagged_weights"))
    refuse_unknown_characters(tokenizer, (task.train_pool or []) + task.heldout_problems)
    ranks = None
    if cfg.fsdp:  # join the process group and shard; the loop runs on every rank
        model, optimizer, ranks = distributed.shard(model, optimizer, checkpoint, cfg.seed, iteration)
    elif checkpoint is not None and is_sharded(checkpoint):  # an FSDP run's checkpoint, resumed in one process
        from ..scale.distributed import load_sharded
        load_sharded(checkpoint, model, optimizer)
    first_rank = ranks is None or ranks.rank == 0
    log = MetricsLog(run_dir, keep_until_iteration=iteration if checkpoint else None, write=first_rank)
    if first_rank:
        (run_dir / "config.json").write_text(json.dumps(config, indent=1))
    run = Run(cfg, run_dir, task, model, tokenizer, optimizer, stop, log, config, iteration, step, amp, logprobs,
              decoder, ranks, off_policy, log.last_eval() if checkpoint is not None else None)
    if run.last_eval is None:
        run.evaluate(iteration)
    print(f"run: {run_dir}  start {heldout_line(run.last_eval)}")
    return run

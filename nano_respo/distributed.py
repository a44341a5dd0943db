"""Data-parallel training with FSDP2: process group, sharding, generation, loss scaling, checkpoints.

Launched by torchrun (one process per device; `torchrun --nnodes M ...` for several nodes),
everything here reads the standard env vars RANK / WORLD_SIZE / LOCAL_RANK. Without them
(`python train.py`) nothing in this file is used and the trainer runs on one device.

The contract that makes N processes compute the same update as one:
- every rank holds whole prompt groups, a contiguous `rank_slice` of the global batch, so
  group advantages need no communication;
- each rank's loss is multiplied by `loss_scale`, so that the mean over ranks that FSDP
  applies to gradients (reduce-scatter with averaging) equals the gradient of the loss of
  the whole global mini-batch, whatever the token counts of the shards;
- the constant of seq-mean-token-sum-norm is the same on every rank (the trainer sets
  norm_len to the generation budget), so no divisor depends on a shard's padded width.

Generation runs inside `full_parameters`: a sharded model would all-gather every layer at
every decoding step, and ranks whose samples end earlier would stop calling forward while
the others wait in the collective. Gathering once before generate and freeing after costs
one full copy of the weights per rank for the duration of the rollout.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                     get_optimizer_state_dict, get_state_dict,
                                                     set_optimizer_state_dict, set_state_dict)
from torch.distributed.fsdp import FSDPModule, fully_shard

from .kernel import LossConfig


def launched_by_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def torchrun_device() -> torch.device:
    """This process's device: the GPU numbered LOCAL_RANK when CUDA is available, else the CPU."""
    if not launched_by_torchrun():
        raise ValueError("fsdp: RANK / WORLD_SIZE are not set; launch with torchrun --nproc_per_node N train.py --fsdp")
    if not torch.cuda.is_available():
        return torch.device("cpu")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(device)
    return device


def init_distributed(backend: str | None = None) -> tuple[int, int, torch.device]:
    """Join the torchrun process group; returns (rank, world_size, device).

    nccl with one GPU per process (LOCAL_RANK) when CUDA is available, else gloo on the CPU.
    """
    device = torchrun_device() if backend != "gloo" else torch.device("cpu")
    if not dist.is_initialized():
        dist.init_process_group(backend or ("nccl" if device.type == "cuda" else "gloo"),
                                device_id=device if device.type == "cuda" else None)
    return dist.get_rank(), dist.get_world_size(), device


def is_main_process() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def shutdown_distributed() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def decoder_layers(model) -> torch.nn.ModuleList:
    """The decoder layers of a Hugging Face causal LM (Qwen3, Qwen3-MoE, Llama-style)."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise ValueError(f"model: {type(model).__name__} has no model.layers; FSDP wrapping expects a decoder LM")
    return layers


def shard_model(model) -> torch.nn.Module:
    """FSDP2: one unit per decoder layer (attention, MLP or router + all experts), then the root.

    Experts stay inside their layer's unit on purpose: routing decides per rank which
    experts run, and a unit per expert would make ranks disagree on which all-gathers to
    join. The root unit holds the embeddings, the final norm and the (possibly tied) head.
    """
    for layer in decoder_layers(model):
        fully_shard(layer)
    fully_shard(model)
    return model


def fsdp_modules(model) -> list:
    return [m for m in model.modules() if isinstance(m, FSDPModule)]


@contextlib.contextmanager
def full_parameters(model):
    """Hold every layer's full parameters for the block, so that generate() runs with no collectives.

    Entering all-gathers every unit (a collective: every rank enters together); inside,
    forwards neither gather nor reshard, so ranks may decode different numbers of steps;
    leaving frees the gathered copies. Peak memory: one full copy of the weights.
    """
    modules = fsdp_modules(model)
    for module in modules:
        module.set_reshard_after_forward(False, recurse=False)
        module.unshard()
    try:
        yield model
    finally:
        for module in modules:
            module.reshard()
            # fully_shard's defaults: layers free their parameters after forward, the root keeps them.
            module.set_reshard_after_forward(module is not model, recurse=False)


def rank_slice(n: int, group_size: int, rank: int, world_size: int) -> slice:
    """This rank's contiguous share of n rows, in whole groups of group_size."""
    if n % (group_size * world_size):
        raise ValueError(f"batch: {n} rows is not a multiple of group_size x world_size = "
                         f"{group_size} x {world_size}; every rank must hold whole groups")
    per_rank = n // world_size
    return slice(rank * per_rank, (rank + 1) * per_rank)


def all_reduce(value: torch.Tensor, op=dist.ReduceOp.SUM) -> torch.Tensor:
    """A reduced copy across ranks (the value itself when not distributed)."""
    if not dist.is_initialized():
        return value
    value = value.clone()
    dist.all_reduce(value, op=op)
    return value


def on_every_rank(flag: torch.Tensor) -> bool:
    """Whether flag holds on every rank (the flag itself when not distributed).

    A step is skipped by all ranks or by none: the ranks that went on would otherwise wait
    forever in the gradient reduction for the ones that skipped.
    """
    return bool(all_reduce(flag.to(torch.int32), dist.ReduceOp.MIN))


def loss_denominator(mask: torch.Tensor, cfg: LossConfig) -> torch.Tensor:
    """What kernel.aggregate divides the summed terms by, on this shard."""
    lengths = mask.sum(-1)  # [B]
    if cfg.agg == "token-mean":
        return lengths.sum().float()
    n_seq = (lengths > 0).sum().float()
    if cfg.agg == "seq-mean-token-sum-norm":
        return n_seq * (cfg.norm_len or mask.shape[-1])
    return n_seq


def loss_scale(mask: torch.Tensor, cfg: LossConfig) -> float:
    """Factor that turns this shard's loss into its share of the global loss, times world size.

    sum_r scale_r * loss_r / world = sum_r terms_r / global denominator = the global loss,
    and FSDP averages gradients over ranks. Empty shards (denominator 0) contribute 0.
    """
    if not dist.is_initialized():
        return 1.0
    local = loss_denominator(mask, cfg)
    total = all_reduce(local.clone())
    return float(dist.get_world_size() * local / total.clamp(min=1))


def checkpoint_model_state(checkpoint: Path) -> Path:
    return checkpoint / "dcp"


def write_sharded(directory: Path, model, optimizer) -> None:
    """This rank's model and optimizer shards into directory/dcp (a collective)."""
    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=checkpoint_model_state(directory),
             no_dist=not dist.is_initialized())


def save_sharded(checkpoint: Path, model, optimizer) -> None:
    """Model and optimizer state through torch.distributed.checkpoint (a collective).

    Each rank writes its own shards; the files load at any world size, also into an
    unsharded model in a plain single process (`load_sharded`). Written into a temporary
    directory that rank 0 renames once every rank has finished.
    """
    checkpoint = Path(checkpoint)
    tmp = checkpoint.with_name(checkpoint.name + ".tmp-dcp")
    if is_main_process():
        shutil.rmtree(tmp, ignore_errors=True)
    if dist.is_initialized():
        dist.barrier()
    write_sharded(tmp, model, optimizer)
    if dist.is_initialized():
        dist.barrier()
    if is_main_process():
        if checkpoint.exists():
            shutil.rmtree(checkpoint)
        os.replace(tmp, checkpoint)
    if dist.is_initialized():
        dist.barrier()


def load_sharded(checkpoint: Path, model, optimizer) -> None:
    """Load a save_sharded checkpoint into model and optimizer, sharded or not, any world size."""
    path = checkpoint_model_state(Path(checkpoint))
    if not path.is_dir():
        raise ValueError(f"resume: {checkpoint} has no sharded checkpoint (expected {path})")
    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=path, no_dist=not dist.is_initialized())
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def has_sharded_state(checkpoint: Path) -> bool:
    return checkpoint_model_state(Path(checkpoint)).is_dir()


def gather_for_generate(model) -> None:
    """Make model.generate (rollouts, evaluation) run inside full_parameters, unchanged callers."""
    generate = model.generate

    def generate_with_full_parameters(*args, **kwargs):
        with full_parameters(model):
            return generate(*args, **kwargs)

    model.generate = generate_with_full_parameters


class FSDPRun:
    """What trainer.train does differently under `torchrun --nproc_per_node N train.py --fsdp`.

    The trainer calls it from one fenced block; rollouts, rl_step, evaluation and logging
    run unchanged on every rank. Every rank evaluates (generate is a collective when it
    gathers), rank 0 writes the metrics; the logged training statistics are rank 0's shard's.
    """

    def __init__(self, cfg):
        # The process group is joined only in wrap: while it exists, transformers' save_pretrained
        # writes weights on rank 0 alone, so a model cache (tiny model, warm start) that another
        # rank created before the model is built would lack its weights.
        self.device = torchrun_device()
        self.rank, self.world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        if cfg.prompts_per_iteration % self.world_size:
            raise ValueError(f"prompts_per_iteration: {cfg.prompts_per_iteration} prompts do not split over "
                             f"{self.world_size} processes")
        if cfg.prompts_per_iteration // self.world_size * cfg.group_size % cfg.minibatches:
            raise ValueError(f"reuse: each process's {cfg.prompts_per_iteration // self.world_size} x "
                             f"{cfg.group_size} episodes do not split into {cfg.minibatches} mini-batches")
        self.cfg = cfg
        atexit.register(shutdown_distributed)

    def wrap(self, model, optimizer, task, log, checkpoint, iteration: int):
        """Join the process group; (sharded model, its optimizer, this rank's task, log) for the trainer's loop."""
        from .sft import hash_seed

        init_distributed()
        # A resumed single-device optimizer state moves over by parameter name; a fresh one stays
        # empty (initialising it here would count one phantom Adam step).
        plain_state = (get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True))
                       if optimizer.state else None)
        shard_model(model)
        gather_for_generate(model)
        hyper = {k: v for k, v in optimizer.param_groups[0].items() if k != "params"}
        optimizer = type(optimizer)(model.parameters())
        optimizer.param_groups[0].update(hyper)
        if checkpoint is not None and has_sharded_state(checkpoint):
            load_sharded(checkpoint, model, optimizer)
        elif plain_state is not None:
            set_optimizer_state_dict(model, optimizer, plain_state, options=StateDictOptions(full_state_dict=True))
        if self.rank:
            torch.manual_seed(hash_seed("rank", self.cfg.seed, self.rank, iteration))  # own samples, rank 0 as 1 process
            log.close()  # ranks > 0 keep the records (a resume reads them) but write nothing
            log.file, log.tensorboard = open(os.devnull, "w"), None
        return model, optimizer, RankTask(task, self.rank, self.world_size), log

    def save_checkpoint(self, run_dir: Path, model, tokenizer, optimizer, iteration: int, step: int,
                        config: dict, keep: int = 2) -> Path:
        """The trainer's checkpoint layout, plus dcp/: model and optimizer shards (a collective).

        Rank 0 also writes the full weights with save_pretrained, so eval.py and --model load
        the directory as usual; the optimizer state lives only in dcp/, which a resume at any
        world size (or in one plain process) loads.
        """
        from .checkpoint import STATE_FILE, rng_state, write_text_atomic

        name = f"checkpoints/iter-{iteration:06d}"
        final, tmp = run_dir / name, run_dir / "checkpoints" / f".tmp-iter-{iteration:06d}"
        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if self.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        dist.barrier()
        write_sharded(tmp, model, optimizer)
        dist.barrier()  # every shard is on disk before rank 0 renames the directory
        if self.rank == 0:
            model.save_pretrained(tmp, state_dict=full)
            tokenizer.save_pretrained(tmp)
            # An optimizer state with no per-parameter state: the trainer's resume loads it, then dcp/.
            empty = {"state": {}, "param_groups": optimizer.state_dict()["param_groups"]}
            torch.save({"iteration": iteration, "step": step, "config": config, "rng": rng_state(),
                        "optimizer": empty}, tmp / STATE_FILE)
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
            write_text_atomic(run_dir / "latest", name)
            older = sorted(p for p in (run_dir / "checkpoints").glob("iter-*") if p != final)
            for stale in older[:max(0, len(older) - (keep - 1))]:
                shutil.rmtree(stale, ignore_errors=True)
        dist.barrier()
        return final


class RankTask:
    """A task whose train_batch(n, seed) is this rank's contiguous share of the global batch of n problems."""

    def __init__(self, task, rank: int, world_size: int):
        self.task, self.rank, self.world_size = task, rank, world_size

    def __getattr__(self, name):
        return getattr(self.task, name)

    def train_batch(self, n: int, seed: int):
        return self.task.train_batch(n, seed)[rank_slice(n, 1, self.rank, self.world_size)]

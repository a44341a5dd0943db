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
- `global_loss_config` fixes the one batch-shape-dependent divisor of the loss (the
  padded length of seq-mean-token-sum-norm) to the global mini-batch's.

Generation runs inside `full_parameters`: a sharded model would all-gather every layer at
every decoding step, and ranks whose samples end earlier would stop calling forward while
the others wait in the collective. Gathering once before generate and freeing after costs
one full copy of the weights per rank for the duration of the rollout.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict, get_state_dict,
                                                     set_state_dict)
from torch.distributed.fsdp import FSDPModule, fully_shard

from .kernel import LossConfig


def launched_by_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def init_distributed(backend: str | None = None) -> tuple[int, int, torch.device]:
    """Join the torchrun process group; returns (rank, world_size, device).

    nccl with one GPU per process (LOCAL_RANK) when CUDA is available, else gloo on the CPU.
    """
    if not launched_by_torchrun():
        raise ValueError("fsdp: RANK / WORLD_SIZE are not set; launch with torchrun --nproc_per_node N train.py --fsdp")
    use_cuda = torch.cuda.is_available() and backend != "gloo"
    if use_cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if not dist.is_initialized():
        dist.init_process_group(backend or ("nccl" if use_cuda else "gloo"),
                                device_id=device if use_cuda else None)
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


def global_loss_config(cfg: LossConfig, mask: torch.Tensor) -> LossConfig:
    """cfg with the padded length of seq-mean-token-sum-norm set to the global mini-batch's.

    The trainer drops completion columns that are padding in every row of a mini-batch,
    so each rank's shard may be narrower than the whole; the width of the whole is the
    widest shard.
    """
    if cfg.agg != "seq-mean-token-sum-norm" or cfg.norm_len is not None:
        return cfg
    width = all_reduce(torch.tensor(mask.shape[-1]), dist.ReduceOp.MAX)
    return dataclasses.replace(cfg, norm_len=int(width))


def loss_denominator(mask: torch.Tensor, cfg: LossConfig) -> torch.Tensor:
    """What kernel.aggregate divides the summed terms by, on this shard (cfg.norm_len resolved)."""
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
    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=checkpoint_model_state(tmp),
             no_dist=not dist.is_initialized())
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

"""Data-parallel training with FSDP2: process group, sharding, the step's two agreements, checkpoints.

Imported by the trainer only under --fsdp. Launched by torchrun (one process per device;
`torchrun --nnodes M ...` for several nodes), everything here reads the standard env vars
RANK / WORLD_SIZE / LOCAL_RANK.

The contract that makes N processes compute the same update as one:
- every rank holds whole prompt groups, a contiguous share of the global batch (the
  trainer's collect_rollouts slices it), so group advantages need no communication;
- each rank's loss is multiplied by `Ranks.loss_factor`, so that the mean over ranks that
  FSDP applies to gradients (reduce-scatter with averaging) equals the gradient of the loss
  of the whole global mini-batch, whatever the token counts of the shards;
- the constant of seq-mean-token-sum-norm is the same on every rank (the trainer sets
  norm_len to the generation budget), so no divisor depends on a shard's padded width;
- a step is skipped by all ranks or by none (`Ranks.all_agree`).

Generation runs inside `gathered`: a sharded model would all-gather every layer at every
decoding step, and ranks whose samples end earlier would stop calling forward while the
others wait in the collective. Gathering once before sampling and freeing after costs one
full copy of the weights per rank for the duration of the rollout.
"""

from __future__ import annotations

import atexit
import contextlib
import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                     get_optimizer_state_dict, get_state_dict,
                                                     set_optimizer_state_dict, set_state_dict)
from torch.distributed.fsdp import FSDPModule, fully_shard

from ..checkpoint import SHARDS, is_sharded, save_checkpoint
from ..tasks import hash_seed


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
def gathered(model):
    """Hold every layer's full parameters for the block, so that sampling runs with no collectives.

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


class Ranks:
    """What one RL step needs from the other processes (the trainer's OneProcess is the one-device version)."""

    def __init__(self):
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()

    def all_agree(self, flag: torch.Tensor) -> bool:
        """Whether flag holds on every rank: the ones that went on would wait forever for one that skipped."""
        flag = flag.to(torch.int32).clone()
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        return bool(flag)

    def loss_factor(self, denominator: torch.Tensor) -> float:
        """Turns this rank's loss (over its kernel.loss_denominator) into its share of the global loss, x world size.

        sum_r factor_r * loss_r / world = sum_r terms_r / global denominator = the global loss,
        and FSDP averages gradients over ranks. Empty shards (denominator 0) contribute 0.
        """
        total = denominator.float().clone()
        dist.all_reduce(total)
        return float(self.world_size * denominator / total.clamp(min=1))

    def barrier(self) -> None:
        dist.barrier()

    def gathered(self, model):
        return gathered(model)


def check_split(prompts_per_iteration: int, minibatches: int) -> torch.device:
    """This process's device, once the batch splits over the ranks in whole groups and mini-batches."""
    if not launched_by_torchrun():
        raise ValueError("fsdp: RANK / WORLD_SIZE are not set; launch with torchrun --nproc_per_node N train.py --fsdp")
    world_size = int(os.environ["WORLD_SIZE"])
    if prompts_per_iteration % world_size:
        raise ValueError(f"prompts_per_iteration: {prompts_per_iteration} prompts do not split over "
                         f"{world_size} processes")
    if prompts_per_iteration // world_size % minibatches:
        raise ValueError(f"reuse: each process's {prompts_per_iteration // world_size} prompts do not split "
                         f"into {minibatches} mini-batches of whole groups")
    return torchrun_device()


def shard(model, optimizer, checkpoint: Path | None, seed: int, iteration: int):
    """Join the process group and shard: (sharded model, its optimizer, Ranks).

    The group is joined only here: while it exists, transformers' save_pretrained writes
    weights on rank 0 alone, so a model cache (tiny model, warm start) that another rank
    created before the model is built would lack its weights.
    """
    init_distributed()
    atexit.register(shutdown_distributed)
    # A resumed single-device optimizer state moves over by parameter name; a fresh one stays
    # empty (initialising it here would count one phantom Adam step).
    plain_state = (get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True))
                   if optimizer.state else None)
    shard_model(model)
    hyper = {k: v for k, v in optimizer.param_groups[0].items() if k != "params"}
    optimizer = type(optimizer)(model.parameters())
    optimizer.param_groups[0].update(hyper)
    if checkpoint is not None and is_sharded(checkpoint):
        load_sharded(checkpoint, model, optimizer)
    elif plain_state is not None:
        set_optimizer_state_dict(model, optimizer, plain_state, options=StateDictOptions(full_state_dict=True))
    ranks = Ranks()
    if ranks.rank:
        torch.manual_seed(hash_seed("rank", seed, ranks.rank, iteration))  # own samples; rank 0 as one process
    return model, optimizer, ranks


def checkpoint_state(model, optimizer):
    """(full weights for save_pretrained, optimizer state for trainer_state.pt, payload writing the shards).

    The full weights let eval.py and --model load the checkpoint as usual; the optimizer state
    lives only in the shards, which a resume at any world size (or in one process) loads.
    """
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    empty = {"state": {}, "param_groups": optimizer.state_dict()["param_groups"]}

    def write_shards(directory: Path) -> None:
        model_state, optimizer_state = get_state_dict(model, optimizer)
        dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=Path(directory) / SHARDS)

    return full, empty, write_shards


def save_sharded(run_dir: Path, model, tokenizer, optimizer, iteration: int, step: int, config: dict, ranks,
                 keep: int) -> Path:
    """train.save under --fsdp: the full weights (eval.py and --model load them) and every rank's shards."""
    weights, optimizer_state, shards = checkpoint_state(model, optimizer)
    return save_checkpoint(run_dir, model, tokenizer, iteration, step, config, optimizer_state, model_state=weights,
                           payload=shards, ranks=ranks, keep=keep)


def load_sharded(checkpoint: Path, model, optimizer) -> None:
    """Load a sharded checkpoint into model and optimizer, sharded or not, at any world size."""
    path = Path(checkpoint) / SHARDS
    if not path.is_dir():
        raise ValueError(f"resume: {checkpoint} has no sharded checkpoint (expected {path})")
    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=path, no_dist=not dist.is_initialized())
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])

"""FSDP2 on the CPU (gloo): 2 processes train exactly like 1, and their checkpoint resumes in 1.

One spawn of 2 workers trains a tiny random Qwen3 and a tiny Qwen3-MoE for STEPS optimizer
steps with the trainer's own rl_step (2 mini-batches x 2 epochs over one fixed rollout
batch, off-policy old log-probs, ReSPO loss, gradient clipping that bites, AdamW), saving a
checkpoint halfway through the trainer's own save (checkpoint.save_checkpoint, the shards
as its payload). This process then runs the same steps on an unsharded model with
no process group, and resumes a fresh model from the 2-process checkpoint. Last, rank 1
alone meets NaN hidden states: both ranks must skip that step and train on together.
Tolerance (float32; the only difference is the order of the float sums in the gradient
reduction): losses atol 1e-6 (order-1 terms that cancel to ~0.02), parameters atol 2e-6
(the 4 steps move them by ~1e-3, 500x more).
"""

import datetime
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import transformers
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from nano_respo.scale import distributed as nd
from nano_respo.checkpoint import latest_checkpoint
from nano_respo.kernel import LossConfig
from nano_respo.models import build_char_tokenizer
from nano_respo.rollout import RolloutBatch, decode
from nano_respo.routes import RouteConfig
from train import OneDevice, TrainConfig, rl_step, save

WORLD = 2
GROUP = 2
MINI_BATCHES, EPOCHS = 2, 2
STEPS = MINI_BATCHES * EPOCHS
SHAPE = dict(vocab_size=48, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=8, intermediate_size=64, max_position_embeddings=64, tie_word_embeddings=True,
             pad_token_id=0, eos_token_id=1, bos_token_id=None)
# Clipping that bites (max_grad_norm), a learning rate that moves the weights in 4 steps; the loss
# config as the trainer builds it (norm_len the generation budget, 7).
STEP = dict(temperature=1.0, max_grad_norm=0.05, prompts_per_iteration=1, group_size=2, reuse=1)


def step_config(loss_cfg, micro_batch) -> TrainConfig:
    return TrainConfig(loss=loss_cfg, micro_batch=micro_batch, **STEP)
FAMILIES = {
    # dense, default aggregation: each shard divides by its own number of sequences
    "dense": (transformers.Qwen3Config, {}, LossConfig(method="respo", norm_len=7), None),
    # MoE, token-mean (each shard divides by its own token count), one sequence per backward
    "moe": (transformers.Qwen3MoeConfig, dict(moe_intermediate_size=16, num_experts=4, num_experts_per_tok=2,
                                              norm_topk_prob=True, router_aux_loss_coef=0.0),
            LossConfig(method="respo", agg="token-mean", norm_len=7), 1),
}


@pytest.fixture(scope="module", autouse=True)
def float32_default():
    """Another test module may have made float64 the session's default dtype."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    yield
    torch.set_default_dtype(previous)


def build_model(family):
    config_class, extra, _, _ = FAMILIES[family]
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config_class(**SHAPE, **extra))


def completion_logprobs(model, input_ids, attention_mask, width):
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # [B, P + C]
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                   use_cache=False).logits[:, -width - 1:-1]  # [B, C, V]
    return torch.log_softmax(logits.float(), -1).gather(-1, input_ids[:, -width:, None]).squeeze(-1)  # [B, C]


def make_batch(family, rows=8, prompt=5, completion=7):
    """Left-padded prompts, right-padded completions of uneven length, old log-probs off-policy."""
    g = torch.Generator().manual_seed(1)
    input_ids = torch.randint(2, SHAPE["vocab_size"], (rows, prompt + completion), generator=g)
    prompt_len = torch.randint(2, prompt + 1, (rows,), generator=g)
    completion_len = torch.tensor([7, 5, 2, 3, 6, 1, 4, 4])  # shards of uneven width and token count
    columns = torch.arange(prompt + completion)
    attention_mask = ((columns >= prompt - prompt_len[:, None])
                      & (columns < prompt + completion_len[:, None])).long()  # [N, P + C]
    input_ids = torch.where(attention_mask.bool(), input_ids, 0)
    with torch.no_grad():
        logp = completion_logprobs(build_model(family), input_ids, attention_mask, completion)
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5, -1.0, 1.0, 2.0, -2.0])
    return RolloutBatch(input_ids, attention_mask, attention_mask[:, prompt:].bool(),
                        logp + 0.3 * torch.randn(logp.shape, generator=g), advantages, advantages)


def train(model, optimizer, batch, family, steps: range, ranks=OneDevice()):
    """The trainer's reuse loop in miniature around its own rl_step; returns the global loss of each step."""
    _, _, loss_cfg, micro_batch = FAMILIES[family]
    per_mini = len(batch.advantages) // MINI_BATCHES
    per_rank = per_mini // ranks.world_size  # whole groups of GROUP rows
    losses = []
    for step in steps:
        start = step % MINI_BATCHES * per_mini + ranks.rank * per_rank
        stats = rl_step(model, optimizer, batch.select(torch.arange(start, start + per_rank)),
                        step_config(loss_cfg, micro_batch), ranks=ranks)
        assert not stats["skipped"] and stats["grad_norm"] > STEP["max_grad_norm"]  # clipping is exercised
        loss = torch.tensor(stats["loss"])
        if dist.is_initialized():
            dist.all_reduce(loss)
        losses.append(float(loss) / ranks.world_size)
    return losses


def make_optimizer(model):
    return torch.optim.AdamW(model.parameters(), lr=1e-3)


def worker(rank, world, port, tmp):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    # A short timeout turns a rank left waiting in a collective into a failure, not a hung test.
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    nd.init_distributed("gloo")
    ranks = nd.Ranks()
    try:
        for family in FAMILIES:
            batch = torch.load(f"{tmp}/{family}-batch.pt", weights_only=False)
            model = build_model(family)
            nd.shard_model(model)
            optimizer = make_optimizer(model)
            losses = train(model, optimizer, batch, family, range(0, STEPS // 2), ranks)
            save(Path(tmp) / f"{family}-run", model, build_char_tokenizer(), optimizer, STEPS // 2, STEPS // 2,
                 TrainConfig(routes=RouteConfig(fsdp=True)), ranks, None)  # train.py's own save under --fsdp
            losses += train(model, optimizer, batch, family, range(STEPS // 2, STEPS), ranks)
            full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
            # Gathered once, the sampler runs with no collectives: rank 1 decodes 4 more steps than rank 0.
            model.eval()
            with torch.no_grad(), nd.gathered(model):
                out, *_ = greedy(model, batch, 3 + 4 * rank)
                logits = model(batch.input_ids[:2]).logits
            if rank == 0:
                torch.save({"losses": losses, "params": full, "generated": out, "logits": logits},
                           f"{tmp}/{family}-fsdp.pt")
            # NaN hidden states on rank 1 alone: both ranks must skip that step, then train on together.
            model.train()
            local = batch.select(torch.arange(rank * GROUP, (rank + 1) * GROUP))
            nan = model.model.norm.register_forward_hook(lambda module, args, out: out * float("nan"))
            if rank == 0:
                nan.remove()
            _, _, loss_cfg, micro_batch = FAMILIES[family]
            skipped = rl_step(model, optimizer, local, step_config(loss_cfg, micro_batch), ranks=ranks)
            nan.remove()
            after = rl_step(model, optimizer, local, step_config(loss_cfg, micro_batch), ranks=ranks)
            torch.save({"skipped": skipped, "after": after}, f"{tmp}/{family}-skip-rank{rank}.pt")
    finally:
        nd.shutdown_distributed()


def greedy(model, batch, steps: int):
    """The trainer's sampler, greedy, on the first two prompts; an EOS that never comes decodes every step."""
    return decode(model, batch.input_ids[:2, :5], torch.ones(2, 5, dtype=torch.long), steps, 1.0, greedy=True,
                  eos_ids=[-1], pad_id=0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def fsdp_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fsdp")
    for family in FAMILIES:
        torch.save(make_batch(family), tmp / f"{family}-batch.pt")
    mp.spawn(worker, args=(WORLD, free_port(), str(tmp)), nprocs=WORLD, join=True)
    return tmp


def assert_same_params(got, want):
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=2e-6, msg=name)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_two_processes_train_like_one(fsdp_runs, family):
    batch = torch.load(fsdp_runs / f"{family}-batch.pt", weights_only=False)
    fsdp = torch.load(fsdp_runs / f"{family}-fsdp.pt", weights_only=False)
    model = build_model(family)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    losses = train(model, make_optimizer(model), batch, family, range(STEPS))
    assert not dist.is_initialized()
    torch.testing.assert_close(torch.tensor(fsdp["losses"]), torch.tensor(losses), rtol=1e-5, atol=1e-6)
    assert_same_params(fsdp["params"], model.state_dict())
    moved = max(float((model.state_dict()[k] - start[k]).abs().max()) for k in start)
    assert moved > 500 * 2e-6, "the steps barely moved the parameters: the comparison would prove nothing"
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(fsdp["logits"], model(batch.input_ids[:2]).logits, rtol=0, atol=1e-4)
        tokens, *_ = greedy(model, batch, 3)
    assert torch.equal(fsdp["generated"], tokens)  # rank 0's 3 tokens; rank 1 decoded 7 meanwhile


@pytest.mark.parametrize("family", list(FAMILIES))
def test_two_process_checkpoint_resumes_in_one(fsdp_runs, family):
    batch = torch.load(fsdp_runs / f"{family}-batch.pt", weights_only=False)
    fsdp = torch.load(fsdp_runs / f"{family}-fsdp.pt", weights_only=False)
    model = build_model(family)
    torch.nn.init.normal_(model.model.embed_tokens.weight)  # the load must overwrite every weight
    optimizer = make_optimizer(model)
    checkpoint = latest_checkpoint(fsdp_runs / f"{family}-run")
    nd.load_sharded(checkpoint, model, optimizer)
    assert optimizer.state_dict()["state"], "Adam moments were not restored"
    losses = train(model, optimizer, batch, family, range(STEPS // 2, STEPS))
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(fsdp["losses"][STEPS // 2:]), rtol=1e-5, atol=1e-6)
    assert_same_params(model.state_dict(), fsdp["params"])


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_non_finite_step_on_one_rank_is_skipped_by_every_rank(fsdp_runs, family):
    for rank in range(WORLD):
        result = torch.load(fsdp_runs / f"{family}-skip-rank{rank}.pt", weights_only=False)
        assert result["skipped"]["skipped"] == 1 and "non-finite" in result["skipped"]["skip_reason"], rank
        assert result["after"]["skipped"] == 0 and result["after"]["grad_norm"] > 0, rank


def test_torchrun_fsdp_train_then_resume_in_one_process(tmp_path):
    """train.py under torchrun --fsdp (MoE, 2 processes) writes a sharded checkpoint; a plain run resumes it."""
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    flags = ["--model", "tiny-qwen3-moe", "--sft-steps", "0", "--prompts-per-iteration", "4", "--group-size", "2",
             "--reuse", "2", "--epochs", "1", "--max-new-tokens", "6", "--eval-problems", "2", "--eval-samples", "1",
             "--eval-every", "100", "--out-dir", str(tmp_path), "--name", "r", "--no-plots"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "NANO_RESPO_CACHE": str(tmp_path / "cache")}
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                    str(free_port()), "train.py", "--fsdp", "--iterations", "1", *flags],
                   cwd=root, env=env, check=True, capture_output=True)
    checkpoint = tmp_path / "r/checkpoints/iter-000001"
    full = transformers.AutoModelForCausalLM.from_pretrained(checkpoint)  # what eval.py and --model load
    sharded = transformers.AutoModelForCausalLM.from_pretrained(checkpoint)
    torch.nn.init.zeros_(sharded.model.norm.weight)
    nd.load_sharded(checkpoint, sharded, torch.optim.AdamW(sharded.parameters()))
    assert_same_params(full.state_dict(), sharded.state_dict())  # rank 0's full weights = the DCP shards
    subprocess.run([sys.executable, "train.py", "--resume", "--iterations", "2", *flags],
                   cwd=root, env=env, check=True, capture_output=True)
    records = [json.loads(line) for line in (tmp_path / "r/metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "train"] == [1, 2, 3, 4]  # rank 0 alone wrote steps 1-2
    assert (tmp_path / "r/checkpoints/iter-000002/model.safetensors").is_file()

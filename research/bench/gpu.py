"""Qwen3-shaped models at real sizes with random weights on one GPU: generation and training throughput.

    python -m research.bench.gpu                              # qwen3-0.6b, qwen3-1.7b, qwen3-moe-small
    python -m research.bench.gpu --models qwen3-4b --batch 8 --length 1024
    python -m research.bench.gpu --dry-run                    # no GPU: shapes, parameter and FLOP counts only
    python -m research.bench.gpu --cpu-smoke                  # no GPU: the whole script on a tiny shape (CPU_SMOKE)

Nothing is downloaded: each model is Qwen3Config / Qwen3MoeConfig with the published
shape, randomly initialised in bfloat16 on the GPU. Per model it prints, each route with its
tokens/s, peak memory and MFU, and the packed training route's time against the padded one's:
- generation, rollout.decode (each distinct prompt prefilled once, finished rows dropped: up to commit
  9561567 --lean-sampler's decode_lean, timed there against the plain loop that is gone): --batch rows,
  --batch / --group-size distinct prompts of --prompt-len tokens, up to --new-tokens each. A random model almost never
  picks one EOS id, so a share --eos-share of the vocabulary ends a row: each sampled token ends
  it with a chance of about --eos-share, and rows end at different steps, as RL answers do;
  tokens/s counts response tokens;
- training, the padded forward against the packed one (--packed-forward): one RL optimizer step
  (forward, the chunked log-probs, the ReSPO loss, backward, AdamW) on --batch sequences of a
  --prompt-len prompt and a completion of a length drawn uniformly from 1 to --length minus the
  prompt; tokens/s counts real (unpadded) tokens;
- MFU: model FLOPs / (seconds x --peak-tflops). Model FLOPs per token: 2 N forward (6 N with
  backward) over the active non-embedding parameters plus the LM head, plus causal attention
  2 x 2 x layers x heads x head_dim x (mean context) forward (x3 with backward). Both routes of a
  pair are charged the same useful FLOPs, so the one that skips work shows the higher MFU.
"""

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from nano_respo.kernel import LossConfig, policy_loss
from nano_respo.rollout import RolloutBatch, decode
from nano_respo.scale.logprobs import chunked_policy_logprobs

VOCAB = 151936  # Qwen3's; --vocab changes it (a smaller one only for the CPU smoke test)
# Published Qwen3 shapes (config.json of the Qwen/Qwen3-* checkpoints); qwen3-moe-small keeps
# Qwen3-30B-A3B's expert layout (128 experts, 8 active, 768 wide) on 8 layers to fit one GPU.
SHAPES = {
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, tie_word_embeddings=True),
    "qwen3-1.7b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, tie_word_embeddings=True),
    "qwen3-4b": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, tie_word_embeddings=True),
    "qwen3-8b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, tie_word_embeddings=False),
    "qwen3-moe-small": dict(hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
                            num_hidden_layers=8, num_attention_heads=32, num_key_value_heads=4, num_experts=128,
                            num_experts_per_tok=8, norm_topk_prob=True, tie_word_embeddings=False),
    "qwen3-tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                       num_key_value_heads=1, tie_word_embeddings=True),  # a CPU smoke test of this script
}


def make_config(name: str, vocab: int = VOCAB):
    import transformers

    shape = SHAPES[name]
    config_class = transformers.Qwen3MoeConfig if "num_experts" in shape else transformers.Qwen3Config
    return config_class(vocab_size=vocab, head_dim=128, max_position_embeddings=40960, rope_theta=1e6,
                        **shape)


def active_params(model, config) -> tuple[int, int]:
    """(all parameters, active non-embedding parameters per token incl. the LM head)."""
    total = sum(p.numel() for p in model.parameters())
    active = 0
    for name, p in model.named_parameters():
        if "embed_tokens" in name:
            continue
        share = config.num_experts_per_tok / config.num_experts if ".experts." in name else 1.0
        active += p.numel() * share
    if config.tie_word_embeddings:  # the tied head is still a vocab x hidden matmul per token
        active += model.get_input_embeddings().weight.numel()
    return total, int(active)


def flops_per_token(config, active: int, context: float, backward: bool) -> float:
    attention = 2 * 2 * config.num_hidden_layers * config.num_attention_heads * config.head_dim * context
    return (2 * active + attention) * (3 if backward else 1)


def build(name: str, device: str, vocab: int = VOCAB):
    from transformers import AutoModelForCausalLM

    config = make_config(name, vocab)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    return model, config


def start_clock(device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    return time.perf_counter()


def stop_clock(device, start: float) -> tuple[float, float]:
    """(seconds since start, peak bytes allocated; nan off the GPU)."""
    if device.type != "cuda":
        return time.perf_counter() - start, float("nan")
    torch.cuda.synchronize(device)
    return time.perf_counter() - start, torch.cuda.max_memory_allocated(device)


def measure_generation(model, args, device, decoder=decode) -> tuple[float, float, int]:
    """(seconds, peak bytes, response tokens) of sampling one rollout batch with `decoder`."""
    generator = torch.Generator(device).manual_seed(0)  # the same prompts on every call
    prompts = torch.randint(args.vocab, (args.batch // args.group_size, args.prompt_len), device=device, generator=generator)
    prompts = prompts.repeat_interleave(args.group_size, 0)  # [B, P] G rows per prompt, as a rollout batch
    eos_ids = list(range(max(1, round(args.eos_share * args.vocab))))
    run = lambda n: decoder(model, prompts, torch.ones_like(prompts), n, temperature=1.0, greedy=False,  # noqa: E731
                            eos_ids=eos_ids, pad_id=0)
    run(4)  # warm-up
    torch.manual_seed(0)
    start = start_clock(device)
    _, _, in_response, _ = run(args.new_tokens)
    return (*stop_clock(device, start), int(in_response.sum()))


def ragged_batch(args, device) -> RolloutBatch:
    """--batch sequences: a --prompt-len prompt, then a completion of 1 to --length - --prompt-len tokens (padded)."""
    generator = torch.Generator(device).manual_seed(0)
    width = args.length - args.prompt_len
    lengths = torch.randint(1, width + 1, (args.batch,), device=device, generator=generator)  # [B]
    completion_mask = torch.arange(width, device=device) < lengths[:, None]  # [B, C]
    attention_mask = torch.cat([torch.ones(args.batch, args.prompt_len, dtype=torch.bool, device=device),
                                completion_mask], 1).long()  # [B, P + C]
    input_ids = torch.randint(args.vocab, attention_mask.shape, device=device, generator=generator) * attention_mask
    zeros = torch.zeros(args.batch, device=device)
    return RolloutBatch(input_ids, attention_mask, completion_mask, torch.zeros(completion_mask.shape, device=device),
                        zeros, torch.randn(args.batch, device=device, generator=generator))


def measure_training(model, args, device, batch: RolloutBatch, packed: bool) -> tuple[float, float]:
    """(seconds per optimizer step, peak bytes) of the trainer's step on `batch`, padded or packed."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)

    def step():
        logp, _, _ = chunked_policy_logprobs(model, batch, 1.0, packed=packed)  # [B, C] the [B, C, V] logits never built
        loss, _ = policy_loss(logp, logp.detach(), batch.advantages, batch.completion_mask, LossConfig(method="respo"))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # warm-up (allocates the AdamW state)
    start = start_clock(device)
    for _ in range(args.train_steps):
        step()
    seconds, peak = stop_clock(device, start)
    return seconds / args.train_steps, peak


def report(label: str, tokens: int, seconds: float, flops: float, peak: float, args) -> str:
    return (f"  {label:<24} {tokens / seconds:10.0f} tokens/s  MFU {tokens * flops / seconds / args.peak_tflops / 1e12:6.1%}"
            f"  peak {peak / 2**30:.1f} GiB")


# --cpu-smoke: the settings of a tiny CPU run that still takes every route (rows end at different steps).
CPU_SMOKE = dict(device="cpu", models=["qwen3-tiny"], vocab=512, batch=4, group_size=2, prompt_len=8, new_tokens=8,
                 length=32, eos_share=0.1, train_steps=1)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--models", nargs="+", default=["qwen3-0.6b", "qwen3-1.7b", "qwen3-moe-small"],
                        choices=list(SHAPES))
    parser.add_argument("--batch", type=int, default=32, help="rows sampled, and sequences per training step")
    parser.add_argument("--group-size", type=int, default=8, help="samples per prompt (G): rollout.decode prefills each prompt once")
    parser.add_argument("--eos-share", type=float, default=1 / 128,
                        help="share of the vocabulary that ends a row: about this chance per sampled token")
    parser.add_argument("--prompt-len", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--length", type=int, default=1024, help="training sequence length")
    parser.add_argument("--vocab", type=int, default=VOCAB, help="vocabulary size (Qwen3's; smaller for a CPU smoke)")
    parser.add_argument("--train-steps", type=int, default=3)
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="bf16 dense peak of the GPU (H100/H200 SXM)")
    parser.add_argument("--device", default="cuda", help="cuda (the measurement) or cpu (a smoke test)")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: build on the meta device, count only")
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="no GPU: every step of the script on a tiny shape on the CPU (CPU_SMOKE; figures mean nothing)")
    args = parser.parse_args()
    if args.cpu_smoke:
        vars(args).update(CPU_SMOKE)
    device = torch.device("meta" if args.dry_run else args.device)
    if args.batch % args.group_size or args.length <= args.prompt_len:
        raise SystemExit(f"--batch {args.batch} must be a multiple of --group-size {args.group_size}, and --length "
                         f"{args.length} longer than --prompt-len {args.prompt_len}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("research/bench/gpu.py needs a CUDA GPU; --dry-run counts parameters and FLOPs without one")
    if not args.dry_run:
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (smoke test: MFU meaningless)"
        print(f"{name}, peak {args.peak_tflops:.0f} TFLOP/s bf16 assumed; "
              f"batch {args.batch}, sample {args.prompt_len}+{args.new_tokens}, train length {args.length}")
    for name in args.models:
        model, config = build(name, device, args.vocab)
        total, active = active_params(model, config)
        gen_context = args.prompt_len + args.new_tokens / 2
        gen_flops = flops_per_token(config, active, gen_context, backward=False)
        train_flops = flops_per_token(config, active, args.length / 2, backward=True)
        print(f"{name}: {total / 1e9:.2f} B parameters, {active / 1e9:.2f} B active per token; "
              f"{gen_flops / 1e9:.2f} GFLOP/token generating, {train_flops / 1e9:.2f} GFLOP/token training")
        if args.dry_run:
            continue
        times = {}
        seconds, peak, tokens = measure_generation(model, args, device)
        print(report("generation decode", tokens, seconds, gen_flops, peak, args))
        batch = ragged_batch(args, device)
        tokens = int(batch.attention_mask.sum())
        for label, packed in (("training padded", False), ("training packed", True)):
            times[label], peak = measure_training(model, args, device, batch, packed)
            print(report(label, tokens, times[label], train_flops, peak, args))
        print(f"  packed / padded time {times['training packed'] / times['training padded']:.2f} "
              f"({tokens} real tokens of {batch.attention_mask.numel()} padded)")
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

"""Where one RL step's time goes on the tiny model: what research/bench/step.py's "where the time goes" cites.

    python -m research.bench.profile_step [--model tiny-qwen3] [--repeats 3]

Prints, for a rollout batch shaped like research/bench/step.py's (8 prompts x 8 samples, 32 new tokens):
- generation: our sampler (rollout.sample: the KV-cache decode loop with log mu, EOS handling
  and text decoding) against a bare decode loop of the same number of steps (one forward per
  token and a multinomial draw, no stopping): the difference is the sampler's bookkeeping;
- training: torch.profiler's split of one mini-batch's forward/backward (the trainer's
  policy_logprobs and a sum of its log-probs), by operator, top rows by self CPU time.
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from research.lab.records import measurement, write_record
from nano_respo.models import load_model
from nano_respo.rollout import RolloutBatch, encode_prompts, kv_cache, policy_logprobs, sample
from nano_respo.tasks import make_task


@torch.no_grad()
def bare_decode(model, encoded, steps: int) -> None:
    attention_mask = encoded["attention_mask"]  # [N, P]
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # [N, P]
    out = model(input_ids=encoded["input_ids"], attention_mask=attention_mask, position_ids=position_ids,
                use_cache=True, logits_to_keep=1)
    for _ in range(steps):
        token = torch.multinomial(torch.softmax(out.logits[:, -1].float(), -1), 1)  # [N, 1]
        attention_mask = torch.cat([attention_mask, torch.ones_like(token)], 1)
        position_ids = position_ids[:, -1:] + 1
        out = model(input_ids=token, attention_mask=attention_mask, position_ids=position_ids,
                    use_cache=True, **kv_cache(out))


def median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--model", default="tiny-qwen3")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--record", help="also write what is printed to this JSON file (research/bench/README.md reads it)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, tokenizer = load_model(args.model)
    problems = make_task("reverse", n_heldout=8).train_batch(args.prompts, seed=0)
    prompts = [p.prompt for p in problems for _ in range(args.group_size)]

    model.eval()
    samples = sample(model, tokenizer, prompts, args.max_new_tokens)
    width = samples.completion_mask.shape[1]
    ours = median_seconds(lambda: sample(model, tokenizer, prompts, args.max_new_tokens), args.repeats)
    encoded = encode_prompts(tokenizer, prompts, model.device)
    bare = median_seconds(lambda: bare_decode(model, encoded, width), args.repeats)
    print(f"generation, {len(prompts)} samples x {width} tokens: rollout.sample {ours:.2f} s, "
          f"bare decode loop {bare:.2f} s (the sampler's own overhead {ours / bare - 1:+.0%})")

    model.train()
    half = torch.arange(len(prompts) // 2)  # one of research/bench/step.py's two mini-batches
    mini = RolloutBatch(samples.input_ids, samples.attention_mask, samples.completion_mask, samples.old_logp,
                        torch.zeros(len(prompts)), torch.zeros(len(prompts))).select(half)

    def forward_backward():
        logp, _, _ = policy_logprobs(model, mini, temperature=1.0)
        (logp * mini.completion_mask).sum().backward()

    forward_backward()  # warm-up
    with torch.profiler.profile() as profile:
        forward_backward()
    events = profile.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    print(f"training, one mini-batch of {len(half)} sequences: forward/backward {total / 1e6:.3f} s of self CPU time")
    top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:8]
    for event in top:
        print(f"  {event.key[:60]:60s} {event.self_cpu_time_total / total:6.1%}")
    write_record(measurement("research.bench.profile_step", {
        "samples": len(prompts), "tokens": width, "sample_seconds": ours, "bare_decode_seconds": bare,
        "minibatch": len(half), "self_cpu_seconds": total / 1e6,
        "self_cpu_share": {event.key: event.self_cpu_time_total / total for event in top}}), args.record)


if __name__ == "__main__":
    main()

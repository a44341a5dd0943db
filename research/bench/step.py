"""Time per RL step: nano-respo against TRL's GRPOTrainer on the same work, alternating in one run.

    .venv-bench/bin/python -m research.bench.step [--repeats 5]      # TRL from research/bench/requirements.txt
    .venv-bench/bin/python -m research.bench.step --quick            # every part at a tiny size, in seconds (a smoke test)

One RL step = one rollout batch (P prompts x G samples, up to --max-new-tokens tokens each)
and `reuse` optimizer steps on it (epochs x mini-batches). TRL gets the same local tiny
Qwen3 (random init, nothing downloaded), chat-formatted prompts of the same task, the same
group size, completion budget, temperature, learning rate and reuse (num_iterations =
epochs, steps_per_generation = mini-batches), on the CPU without vLLM, gradient
checkpointing or a reference model. Our step runs inside a TRL callback after every
`reuse` TRL optimizer steps, so the two alternate; the first pair is warm-up.

Also printed, for our step alone, the overhead ratio: our step time divided by the time
of its bare parts on the same batch, one generate call of the same length plus one
forward/backward (naive log-softmax, no optimizer) over every mini-batch our step trains
on.

    --warm-start     both start from the cached warm start of `reverse` (train.py's, built on
                     first use), so answers have realistic lengths (a random model runs nearly
                     every completion to the budget)
    --less-work      after each TRL step, ours three times on the same prompts: as is (train.py's
                     defaults: the padded training forward), --shared-prompts and --packed-forward;
                     prints each against TRL and against ours as is. (The committed record,
                     step-less-work.json, was made at commit 9561567 with five variants: there
                     --shared-prompts was on by default and --lean-sampler picked the sampler that
                     is now rollout.decode, the only one.)
"""

import argparse
import os
import statistics
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch

from nano_respo.cli import from_flat
from nano_respo.kernel import LossConfig, minibatch_order, reuse_split
from research.lab.records import measurement, write_record
from nano_respo.models import load_model, resolve_model_path
from nano_respo.rollout import encode_prompts
from nano_respo.sft import initial_model
from nano_respo.tasks import hash_seed, make_task
from research.common import task_of
from train import TrainConfig, rl_iteration, routes_of


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--model", default="tiny-qwen3", help="tiny-qwen3 or tiny-qwen3-moe")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per rollout batch (P)")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--minibatches", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5, help="measured steps of each, after one warm-up step")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--warm-start", action="store_true", help="start both from the cached warm start")
    parser.add_argument("--less-work", action="store_true",
                        help="also time ours with --shared-prompts and with --packed-forward")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke test: 2 prompts x 2 samples, 8 new tokens, 1 repeat (its figures mean nothing)")
    parser.add_argument("--record", help="also write what is printed to this JSON file (research/bench/README.md reads it)")
    args = parser.parse_args()
    if args.quick:
        args.prompts, args.group_size, args.max_new_tokens, args.repeats = 2, 2, 8, 1
    return args


# Our step's variants under --less-work: name -> the flags it sets. "ours" is train.py's defaults (the padded
# training forward); the others the opt-in routes to the same numbers (each prompt computed once, or packed rows).
VARIANTS = {"ours": {}, "shared": {"shared_prompts": True}, "packed": {"packed_forward": True}}


def our_config(args) -> TrainConfig:
    return from_flat(TrainConfig, dict(loss=LossConfig(method="grpo", agg="token-mean", norm_len=args.max_new_tokens),
                                       model=args.model, task="reverse", prompts_per_iteration=args.prompts,
                                       group_size=args.group_size, reuse=args.epochs * args.minibatches,
                                       epochs=args.epochs, max_new_tokens=args.max_new_tokens, lr=1e-5, sft_steps=0,
                                       device="cpu", threads=args.threads, plots=False))


def our_step(model, optimizer, tokenizer, task, cfg, iteration):
    """One RL step exactly as train.train runs it; returns (seconds, the rollout batch, its mini-batches)."""
    start = time.perf_counter()
    model.train()
    logprobs = routes_of(cfg.routes)[1]  # the training forward its flags choose, as train() runs
    batch, _, _ = rl_iteration(model, tokenizer, task, optimizer, cfg, iteration, 0, logprobs)
    seconds = time.perf_counter() - start
    epochs, per_epoch = reuse_split(cfg.reuse, cfg.epochs)
    orders = [torch.Generator().manual_seed(hash_seed("order", cfg.seed, iteration, epoch)) for epoch in range(epochs)]
    minibatches = [batch.select(index) for order in orders
                   for index in minibatch_order(len(batch.rewards) // cfg.group_size, cfg.group_size, per_epoch, order)]
    return seconds, batch, minibatches


def bare_parts(model, tokenizer, prompts, batch, minibatches, temperature):
    """Seconds of one plain sampling generate call of the batch's length + forward/backward of its mini-batches."""
    width = batch.completion_mask.shape[1]
    encoded = encode_prompts(tokenizer, prompts, model.device)
    start = time.perf_counter()
    with torch.no_grad():
        model.generate(**encoded, do_sample=True, temperature=temperature, top_k=None, top_p=None,
                       max_new_tokens=width, min_new_tokens=width, pad_token_id=tokenizer.pad_token_id)
    generate_seconds = time.perf_counter() - start
    start = time.perf_counter()
    for mini in minibatches:
        c = mini.completion_mask.shape[1]
        logits = model(input_ids=mini.input_ids, attention_mask=mini.attention_mask).logits[:, -c - 1:-1]  # [b, c, V]
        logp = torch.log_softmax(logits, -1).gather(-1, mini.input_ids[:, -c:, None]).squeeze(-1)  # [b, c]
        (logp * mini.completion_mask).sum().backward()
    model.zero_grad(set_to_none=True)
    return generate_seconds, time.perf_counter() - start


def trl_trainer(args, cfg, task, tokenizer, callback, model_path):
    try:
        from datasets import Dataset
        from trl import GRPOConfig, GRPOTrainer
    except ImportError:
        raise SystemExit("research/bench/step.py needs TRL: python -m venv --system-site-packages .venv-bench && "
                         ".venv-bench/bin/pip install -r research/bench/requirements.txt") from None
    problems = task.train_batch(args.prompts * (args.repeats + 2), seed=123)
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": p.prompt}], add_generation_prompt=True,
                                             tokenize=False) for p in problems]
    dataset = Dataset.from_dict({"prompt": prompts, "answer": [p.answer for p in problems]})

    def reward(completions, answer, **_):
        return [float(task.reward(c, a)) for c, a in zip(completions, answer)]

    episodes = args.prompts * args.group_size
    config = GRPOConfig(
        output_dir=str(Path(os.environ.get("TMPDIR", "/tmp")) / "nano-respo-bench-trl"), use_cpu=True,
        use_vllm=False, bf16=False, report_to="none", save_strategy="no", logging_steps=10**6,
        per_device_train_batch_size=episodes // args.minibatches, gradient_accumulation_steps=1,
        steps_per_generation=args.minibatches, num_iterations=args.epochs, num_generations=args.group_size,
        max_completion_length=args.max_new_tokens, temperature=cfg.temperature, learning_rate=cfg.lr,
        beta=0.0, loss_type="dapo", scale_rewards="none", gradient_checkpointing=False,
        max_steps=(args.repeats + 1) * cfg.reuse, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=0.0, max_grad_norm=cfg.max_grad_norm, dataloader_num_workers=0, seed=0,
        disable_tqdm=True)
    return GRPOTrainer(model=model_path, reward_funcs=reward, args=config, train_dataset=dataset,
                       processing_class=tokenizer, callbacks=[callback])


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    from transformers import TrainerCallback

    cfg = our_config(args)
    # The warm start's cache entry is named by its task's data: build that task exactly as train.py does.
    task = task_of(cfg) if args.warm_start else make_task(cfg.task, n_heldout=8)
    torch.manual_seed(0)
    if args.warm_start:  # train.py's own warm start (cached), and TRL loads the same directory
        model, tokenizer = initial_model(replace(cfg, sft=replace(cfg.sft, steps=None)), task, "cpu")
        model_path = model.name_or_path
    else:
        model, tokenizer = load_model(args.model)
        model_path = resolve_model_path(args.model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    variants = VARIANTS if args.less_work else {"ours": VARIANTS["ours"]}
    times = {"trl": [], "generate": [], "forward_backward": [], **{name: [] for name in variants}}

    class Alternate(TrainerCallback):
        """After each TRL step (reuse optimizer steps), run one of ours; TRL's clock excludes it."""

        def __init__(self):
            self.mark = time.perf_counter()

        def on_step_end(self, run_args, state, control, **kwargs):
            if state.global_step % cfg.reuse:
                return
            times["trl"].append(time.perf_counter() - self.mark)
            iteration = len(times["ours"])
            for name, flags in variants.items():  # the same prompts (iteration) for each
                seconds, batch, minibatches = our_step(model, optimizer, tokenizer, task, replace(cfg, **flags),
                                                       iteration)
                times[name].append(seconds)
                if name == "ours":
                    ours_batch, ours_minibatches = batch, minibatches
            problems = task.train_batch(cfg.prompts_per_iteration, seed=iteration)
            prompts = [p.prompt for p in problems for _ in range(cfg.group_size)]
            for name, value in zip(("generate", "forward_backward"),
                                   bare_parts(model, tokenizer, prompts, ours_batch, ours_minibatches,
                                              cfg.temperature)):
                times[name].append(value)
            print(f"step {iteration}: " + ", ".join(f"{name} {times[name][-1]:.2f} s" for name in variants)
                  + f", TRL {times['trl'][-1]:.2f} s", flush=True)
            self.mark = time.perf_counter()

    trainer = trl_trainer(args, cfg, task, tokenizer, Alternate(), model_path)
    trainer.train()
    measured = {name: values[1:] for name, values in times.items()}  # drop the warm-up pair
    ratios = [o / t for o, t in zip(measured["ours"], measured["trl"])]
    overhead = [o / (g + f) for o, g, f in zip(measured["ours"], measured["generate"], measured["forward_backward"])]
    start = "warm start" if args.warm_start else "random init"
    print(f"\n{args.model} ({start}): {args.prompts} prompts x {args.group_size} samples, "
          f"{args.max_new_tokens} new tokens, "
          f"reuse {cfg.reuse} ({args.epochs} epochs x {args.minibatches} mini-batches), {len(ratios)} repeats")
    for name in (*variants, "trl", "generate", "forward_backward"):
        print(f"  {name:17s} median {statistics.median(measured[name]):.2f} s")
    print(f"ratio ours / TRL:  min {min(ratios):.2f}  median {statistics.median(ratios):.2f}  max {max(ratios):.2f}")
    for name in list(variants)[1:]:
        print(f"ratio {name} / TRL:  {spread([v / t for v, t in zip(measured[name], measured['trl'])])};  "
              f"{name} / ours:  {spread([v / o for v, o in zip(measured[name], measured['ours'])])}")
    print(f"overhead ratio ours / (generate + forward/backward):  min {min(overhead):.2f}  "
          f"median {statistics.median(overhead):.2f}  max {max(overhead):.2f}")
    settings = {k: getattr(args, k) for k in ("model", "prompts", "group_size", "max_new_tokens", "epochs",
                                              "minibatches", "repeats", "warm_start")}
    write_record(measurement("research.bench.step", {"settings": settings, "seconds": measured,
                                              "ratio_to_trl": {name: [v / t for v, t in zip(measured[name], measured["trl"])]
                                                               for name in variants},
                                              "overhead": overhead}), args.record)


def spread(ratios: list[float]) -> str:
    return f"min {min(ratios):.2f}  median {statistics.median(ratios):.2f}  max {max(ratios):.2f}"


if __name__ == "__main__":
    main()

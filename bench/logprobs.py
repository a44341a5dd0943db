"""Peak memory and time of nano_respo.logprobs.token_logprobs against the naive log-softmax.

    python bench/logprobs.py [--lengths 256 512 1024] [--vocab 151936] [--dtype bfloat16] [--chunk 1024]

naive = torch.log_softmax(logits.float(), -1).gather(-1, targets): what most RL code writes.
Both get the same logits [1, T, V] (a leaf that requires grad, as the model's output would)
and are measured in two uses: forward only (no grad: rollout and evaluation log-probs)
and forward + backward (training). Peak memory is what the routine adds on top of the
logits: each measurement runs in a fresh process and reads the peak resident set size
(ru_maxrss) before and after, or torch.cuda.max_memory_allocated on a GPU. The logits
gradient is part of the training peak for both: a routine that takes logits must return it.
"""

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, no install
from nano_respo.logprobs import token_logprobs


def naive_logprobs(logits, targets):
    return torch.log_softmax(logits.float(), -1).gather(-1, targets[..., None]).squeeze(-1)  # [B, T]


ROUTINES = {"ours": token_logprobs, "naive": naive_logprobs}
CHUNKED = {"ours"}  # routines that take chunk_size


def peak_bytes(device) -> int:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def run_once(routine, logits, targets, backward: bool, **kwargs):
    if backward:
        logits.grad = None
        routine(logits, targets, **kwargs).sum().backward()
    else:
        with torch.no_grad():
            routine(logits, targets, **kwargs)


def measure(args) -> dict:
    """One routine at one length, in this (fresh) process: extra peak bytes and median seconds."""
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    g = torch.Generator().manual_seed(0)
    # Drawn in the target dtype: a float32 draw would raise the peak RSS before measuring starts.
    logits = torch.randn(1, args.length, args.vocab, generator=g, dtype=getattr(torch, args.dtype)).mul_(3)
    logits = logits.to(device).requires_grad_(True)  # [1, T, V]
    targets = torch.randint(args.vocab, (1, args.length), generator=g).to(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    routine = ROUTINES[args.routine]
    kwargs = {"chunk_size": args.chunk or None} if args.routine in CHUNKED else {}
    # Warm up on 4 positions first, so the peak counts buffers, not library pages touched once.
    run_once(routine, logits[:, :4].detach().clone().requires_grad_(True), targets[:, :4], args.backward, **kwargs)
    before = peak_bytes(device)
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        run_once(routine, logits, targets, args.backward, **kwargs)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return {"peak": peak_bytes(device) - before, "seconds": statistics.median(times)}


def measure_in_subprocess(args, routine: str, length: int, backward: bool) -> dict:
    command = [sys.executable, __file__, "--measure", "--routine", routine, "--length", str(length),
               "--vocab", str(args.vocab), "--dtype", args.dtype, "--device", args.device,
               "--repeats", str(args.repeats), "--threads", str(args.threads), "--chunk", str(args.chunk)]
    command += ["--backward"] if backward else []
    out = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024])
    parser.add_argument("--vocab", type=int, default=151936, help="Qwen3's vocabulary size")
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"], help="dtype of the logits")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--chunk", type=int, default=0, help="our chunk_size (the trainer's --logprob-chunk); 0 = its default")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--routine", choices=list(ROUTINES), help=argparse.SUPPRESS)
    parser.add_argument("--length", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--backward", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args)))
        return
    print(f"vocab {args.vocab}, {args.dtype} logits [1, T, V] on {args.device}, our chunk {args.chunk}; "
          f"peak = memory added on top of the logits")
    print(f"{'use':18s} {'T':>6s} {'logits MB':>10s} {'ours MB':>9s} {'naive MB':>9s} {'mem ratio':>9s} "
          f"{'ours ms':>9s} {'naive ms':>9s} {'time ratio':>10s}")
    mem_ratios = {False: [], True: []}
    for backward in (False, True):
        for length in args.lengths:
            ours = measure_in_subprocess(args, "ours", length, backward)
            naive = measure_in_subprocess(args, "naive", length, backward)
            logits_mb = length * args.vocab * torch.finfo(getattr(torch, args.dtype)).bits / 8 / 2**20
            mem_ratio = ours["peak"] / naive["peak"]
            mem_ratios[backward].append(mem_ratio)
            print(f"{'forward+backward' if backward else 'forward (no grad)':18s} {length:6d} {logits_mb:10.0f} "
                  f"{ours['peak'] / 2**20:9.0f} {naive['peak'] / 2**20:9.0f} {mem_ratio:9.3f} "
                  f"{ours['seconds'] * 1e3:9.1f} {naive['seconds'] * 1e3:9.1f} "
                  f"{ours['seconds'] / naive['seconds']:10.2f}")
    for backward, ratios in mem_ratios.items():
        print(f"peak memory ours / naive, {'forward+backward' if backward else 'forward (no grad)'}: "
              f"max {max(ratios):.3f} over T = {args.lengths}")


if __name__ == "__main__":
    main()

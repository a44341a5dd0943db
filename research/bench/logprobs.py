"""Peak memory and time of nano_respo.scale.logprobs.token_logprobs against the naive log-softmax.

    python -m research.bench.logprobs [--lengths 256 1024 2048] [--vocab 151936] [--hidden 1024] [--chunk-mb 16]

Both start where the trainer does, from the LM head's input: hidden states [1, T, H] and
the head's weight [V, H] (Qwen3-0.6B's shape by default; bfloat16 on a GPU, float32 on a CPU).
naive = torch.log_softmax((hidden @ weight.T).float(), -1).gather(-1, targets): the logits
[T, V] as a model's forward returns them, then what most RL code writes. ours =
token_logprobs(hidden, weight, targets), which never builds them; in training it also
returns the entropy, as the trainer asks it to (naive does not: a handicap for ours).
Uses: forward only (no grad: e.g. a reference model's log-probs) and forward + backward.
Peak memory is what the routine adds on top of its inputs: each measurement runs in a
fresh process and reads the peak resident set size (ru_maxrss) before and after, or
torch.cuda.max_memory_allocated on a GPU.

Training is measured twice: with the gradient for the hidden states only, which is the
working set a log-prob routine controls, and with the head's gradient too. That one is
V x H (594 MB in float32 at Qwen3-0.6B's shape), the same for both routines, and held
until the optimizer step in any training whatever computes the log-probs; at short
lengths it dominates both peaks.
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

from research.lab.records import measurement, write_record
from nano_respo.scale.logprobs import token_logprobs


def our_logprobs(hidden, weight, targets, chunk_mb, with_entropy):
    out = token_logprobs(hidden, weight, targets, chunk_mb=chunk_mb, with_entropy=with_entropy)
    return out[0] if with_entropy else out  # [B, T]


def naive_logprobs(hidden, weight, targets, **_):
    logits = hidden @ weight.T  # [B, T, V]
    return torch.log_softmax(logits.float(), -1).gather(-1, targets[..., None]).squeeze(-1)  # [B, T]


ROUTINES = {"ours": our_logprobs, "naive": naive_logprobs}


def peak_bytes(device) -> int:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


USES = {"none": "forward (no grad)", "hidden": "train: hidden grad", "both": "train: + head grad"}


def run_once(routine, hidden, weight, targets, backward: bool, **kwargs):
    if backward:
        hidden.grad = weight.grad = None
        routine(hidden, weight, targets, **kwargs).sum().backward()
    else:
        with torch.no_grad():
            routine(hidden, weight, targets, **kwargs)


def measure(args) -> dict:
    """One routine at one length, in this (fresh) process: extra peak bytes and median seconds."""
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    g = torch.Generator().manual_seed(0)
    # Drawn in the target dtype: a float32 draw would raise the peak RSS before measuring starts.
    backward = args.grad != "none"
    hidden = torch.randn(1, args.length, args.hidden, generator=g, dtype=dtype).to(device)  # [1, T, H]
    hidden.requires_grad_(backward)
    weight = torch.randn(args.vocab, args.hidden, generator=g, dtype=dtype).div_(args.hidden ** 0.5)
    weight = weight.mul_(3).to(device).requires_grad_(args.grad == "both")  # [V, H], logits of std ~3
    targets = torch.randint(args.vocab, (1, args.length), generator=g).to(device)  # [1, T]
    routine = ROUTINES[args.routine]
    kwargs = {"chunk_mb": args.chunk_mb or None, "with_entropy": backward}
    # Warm up on 4 positions and 64 tokens first, so the peak counts buffers, not library pages touched once.
    run_once(routine, hidden[:, :4].detach().clone().requires_grad_(backward),
             weight[:64].detach().clone().requires_grad_(weight.requires_grad), targets[:, :4] % 64, backward, **kwargs)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    before = peak_bytes(device)
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        run_once(routine, hidden, weight, targets, backward, **kwargs)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return {"peak": peak_bytes(device) - before, "seconds": statistics.median(times)}


def measure_in_subprocess(args, routine: str, length: int, grad: str) -> dict:
    command = [sys.executable, "-m", "research.bench.logprobs", "--measure", "--routine", routine, "--length", str(length),
               "--vocab", str(args.vocab), "--hidden", str(args.hidden), "--dtype", args.dtype,
               "--device", args.device, "--repeats", str(args.repeats), "--threads", str(args.threads),
               "--chunk-mb", str(args.chunk_mb), "--grad", grad]
    out = subprocess.run(command, check=True, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 2048])
    parser.add_argument("--vocab", type=int, default=151936, help="Qwen3's vocabulary size")
    parser.add_argument("--hidden", type=int, default=1024, help="hidden size (Qwen3-0.6B's)")
    parser.add_argument("--dtype", default="bfloat16" if torch.cuda.is_available() else "float32",
                        choices=["float32", "bfloat16"],
                        help="of hidden states and head (a CPU's bfloat16 matmul is slow)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--chunk-mb", type=float, default=0,
                        help="our chunk (the trainer's --logprob-chunk-mb); 0 = its default")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--record", help="also write what is printed to this JSON file (research/bench/README.md reads it)")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--routine", choices=list(ROUTINES), help=argparse.SUPPRESS)
    parser.add_argument("--length", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--grad", choices=list(USES), default="none", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args)))
        return
    itemsize = torch.finfo(getattr(torch, args.dtype)).bits // 8
    print(f"vocab {args.vocab}, hidden {args.hidden}, {args.dtype} hidden states and head on {args.device}, "
          f"our chunk {args.chunk_mb or 'default'} MB; peak = memory added on top of the inputs; the head's "
          f"gradient, part of both training peaks, is {args.vocab * args.hidden * itemsize / 2**20:.0f} MB")
    print(f"{'use':18s} {'T':>6s} {'logits MB':>10s} {'ours MB':>9s} {'naive MB':>9s} {'mem ratio':>9s} "
          f"{'ours s':>8s} {'naive s':>8s} {'time ratio':>10s}")
    mem_ratios, rows = {grad: [] for grad in USES}, []
    for grad, use in USES.items():
        for length in args.lengths:
            ours = measure_in_subprocess(args, "ours", length, grad)
            naive = measure_in_subprocess(args, "naive", length, grad)
            # RSS grows in pages: at a small vocabulary the naive peak can stay within one, so no ratio.
            mem_ratios[grad].append(ours["peak"] / naive["peak"] if naive["peak"] > 0 else float("nan"))
            rows.append({"use": use, "length": length, "logits_mb": length * args.vocab * itemsize / 2**20,
                         "ours": ours, "naive": naive})
            print(f"{use:18s} {length:6d} {length * args.vocab * itemsize / 2**20:10.0f} "
                  f"{ours['peak'] / 2**20:9.0f} {naive['peak'] / 2**20:9.0f} {mem_ratios[grad][-1]:9.3f} "
                  f"{ours['seconds']:8.2f} {naive['seconds']:8.2f} {ours['seconds'] / naive['seconds']:10.2f}",
                  flush=True)
    for grad, ratios in mem_ratios.items():
        measured = [r for r in ratios if r == r]
        worst = f"max {max(measured):.3f}" if measured else "not measurable (the naive peak stayed below RSS resolution)"
        print(f"peak memory ours / naive, {USES[grad]}: {worst} over T = {args.lengths}")
    write_record(measurement("research.bench.logprobs", {"vocab": args.vocab, "hidden": args.hidden, "dtype": args.dtype,
                                                  "rows": rows}), args.record)

if __name__ == "__main__":
    main()

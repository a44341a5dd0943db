"""A ReSPO loss against the token-level clip loss (grpo) at a large batch.

    python -m research.bench.kernel [--batch 256] [--length 1024] [--repeats 7] [--record research/bench/results/kernel.json]
    python -m research.bench.kernel --method respo             # the published kernel

Both are elementwise work over [B, T] plus reductions, so the ratio should be near 1; the
diagnostics (quantiles, one host sync) are timed too, as the trainer computes them once per mini-batch.
Prints min / median / max over repeats of forward + backward, alternating the two methods.

The committed record (research/bench/results/kernel.json) timed this project's reconstruction, respo_wtilt, with the
aggregation of the time, seq-mean-token-sum-norm, for both methods: the defaults here, so that its command
reruns that measurement.
"""

import argparse
import statistics
import time

import torch

from nano_respo.kernel import LossConfig, diagnostics, policy_loss
from research.lab.records import measurement, write_record


def time_once(cfg, logp_leaf, old_logp, adv, mask):
    logp_leaf.grad = None
    start = time.perf_counter()
    loss, applied = policy_loss(logp_leaf, old_logp, adv, mask, cfg)
    diagnostics(applied["phi"], logp_leaf, old_logp, adv, mask, cfg)
    loss.backward()
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--method", default="respo_wtilt", help="the ReSPO method timed against grpo")
    parser.add_argument("--agg", default="seq-mean-token-sum-norm", help="the loss aggregation of both")
    parser.add_argument("--record", help="also write what is printed to this JSON file (research/bench/README.md reads it)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    B, T = args.batch, args.length
    old_logp = -torch.rand(B, T, generator=g) * 3
    logp = (old_logp + 0.05 * torch.randn(B, T, generator=g)).requires_grad_(True)
    mask = torch.arange(T)[None] < torch.randint(T // 4, T + 1, (B, 1), generator=g)
    adv = torch.randn(B, generator=g)
    configs = {args.method: LossConfig(method=args.method, agg=args.agg), "grpo": LossConfig(method="grpo", agg=args.agg)}
    times = {name: [] for name in configs}
    for name, cfg in configs.items():  # warm-up
        time_once(cfg, logp, old_logp, adv, mask)
    for _ in range(args.repeats):
        for name, cfg in configs.items():
            times[name].append(time_once(cfg, logp, old_logp, adv, mask))
    for name, ts in times.items():
        print(f"{name:6s} forward+backward at [{B}, {T}]: median {statistics.median(ts) * 1e3:.1f} ms")
    ratios = [r / g for r, g in zip(times[args.method], times["grpo"])]
    print(f"ratio {args.method} / grpo: min {min(ratios):.2f}  median {statistics.median(ratios):.2f}  max {max(ratios):.2f}")
    write_record(measurement("research.bench.kernel", {"shape": [B, T], "seconds": times,
                                                 f"ratio_{args.method}_grpo": ratios}), args.record)


if __name__ == "__main__":
    main()

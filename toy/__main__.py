"""Starvation on the toy, in seconds on a CPU: the default kernel (kernel.LossConfig(), ReSPO) beside the sequence clip.

    python -m toy                          # DigitSum, reuse 8, seed 0
    python -m toy --seeds 0 1 2 --reuse 16 --env bandit

Each method trains the same toy policy (toy/train.py, every update through kernel.policy_loss) and is read by
the diagnostics every step records (nano_respo/kernel.py, `diagnostics`): the share of correct answers (A > 0) whose
weight w = pi / mu fell below 0.8 while the batch was reused, the coefficient those answers kept (1 on-policy),
and the final training reward. Means over the run's optimizer steps, then over seeds. One learning rate for
both (the sequence clip's, as the toy study selected it: research/toy/README.md); the study's many-seed
evaluation is research.toy.run.
"""

import argparse
import math
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

from nano_respo.kernel import LossConfig  # noqa: E402
from toy.envs import ENVS  # noqa: E402
from toy.train import Job, RunSettings, train  # noqa: E402


def mean(values) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else float("nan")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m toy", description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=ENVS, default="seq", help="seq: DigitSum; bandit: the factorised bandit")
    parser.add_argument("--reuse", type=int, default=8, help="optimizer steps per rollout batch, R")
    parser.add_argument("--lr", type=float, default=0.003, help="Adam learning rate of both methods")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args(argv)
    default = LossConfig()
    methods = {f"{default.method} (kernel.LossConfig())": default.method, "seq_clip": "seq_clip"}
    settings = RunSettings()
    print(f"toy env {args.env}: {settings.iterations} rollout batches of {settings.prompts_per_batch} prompts x "
          f"{settings.group_size}, each reused R = {args.reuse} times, Adam lr {args.lr:g}, seeds "
          f"{' '.join(map(str, args.seeds))}, loss aggregation {default.agg}")
    print(f"{'method':28}  {'positives with w < 0.8':>22}  {'coefficient they kept':>21}  {'final reward':>12}")
    for name, method in methods.items():
        records = [train(Job(env=args.env, method=method, reuse=args.reuse, seed=seed, lr=args.lr,
                             loss={"agg": default.agg})) for seed in args.seeds]
        low, kept, final = (mean([r[key] for r in records]) for key in ("low_w_pos_frac", "phi_low_w_pos",
                                                                         "final_reward"))
        print(f"{name:28}  {low:22.1%}  {kept:21.2f}  {final:12.2f}")


if __name__ == "__main__":
    main()

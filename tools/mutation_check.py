"""Break the kernel on purpose and check that the derivation tests notice.

    python tools/mutation_check.py              # every mutant, one kernel test run each
    python tools/mutation_check.py tilt SAPO    # only the mutants whose names contain these
    python tools/mutation_check.py --fail-fast --workers 2  # each test run stops at its first failure,
                                                            # two at a time (what CI runs)

Each mutant is one textual edit of nano_respo/kernel.py (or of the diagnostics it is watched by,
nano_respo/diagnostics.py, or of the surrogate the tests compare it with, nano_respo/surrogate.py), applied to a
temporary copy of the package; the kernel
tests run against the copy and the families that fail are printed. A mutant that no test
catches is a hole in the suite. The property tests run with the quick profile (tests/conftest.py),
what a user's `python -m pytest -q` runs, so a mutant must be caught with the fewer examples. Every
site is looked up before any test runs: one the code no longer holds stops the check (exit 2),
naming it. Exit 0 only when every mutant is caught.
"""

import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ["tests/derivations/test_kernel_derivations.py", "tests/derivations/test_kernel_numerics.py",
         "tests/derivations/test_kernel_decoupled.py", "tests/derivations/test_published_kernel.py"]
FAMILIES = {  # test-name prefix -> its family number in tests/derivations/test_kernel_derivations.py's docstring
    "test_on_policy": "1", "test_baseline": "2", "test_clip_table": "2", "test_surrogate": "3",
    "test_corners": "4", "test_alpha_divergence": "5", "test_variational": "6",
    "test_positive_branch": "7", "test_negative_branch": "7", "test_aggregation": "agg",
    # tests/derivations/test_published_kernel.py, ReSPO's published kernel
    "test_the_default_coefficient": "9", "test_log_w_is_clamped": "9", "test_policy_loss_with_the_default": "9",
    "test_both_branches": "10", "test_the_positive_branch_is": "10", "test_the_negative_branch_peaks": "10",
    "test_phi_0": "11", "test_the_order_one": "11", "test_the_corners_of": "11",
    "test_mu_times": "12", "test_the_tilt": "12", "test_lambda_plus": "12", "test_the_slope": "12",
    "test_the_closed_form": "13", "test_the_loss_gradient": "13",
}  # tests/derivations/test_kernel_decoupled.py's families print as §7
KERNEL, DIAGNOSTICS, SURROGATE = "nano_respo/kernel.py", "nano_respo/diagnostics.py", "nano_respo/surrogate.py"
MUTANTS = [
    ("flip the sign of the loss", KERNEL, "terms = -(phi * advantages", "terms = (phi * advantages"),
    ("drop the tilt", KERNEL, "log_phi = alpha * log_w - lam * torch.expm1", "log_phi = alpha * log_w - 0 * torch.expm1"),
    ("swap VESPO's branches", KERNEL, "power_tilt(log_w, *pos, log_w_max),\n                       power_tilt(log_w, *neg, log_w_max))",
     "power_tilt(log_w, *neg, log_w_max),\n                       power_tilt(log_w, *pos, log_w_max))"),
    # docs/math.md §3-§4, ReSPO's published kernel
    ("swap ReSPO's branches", KERNEL,
     "respo_branch(log_w, alpha_pos, beta_pos, lambda_pos, log_w_max),\n                       respo_branch(log_w, alpha_neg, beta_neg, lambda_neg, log_w_max))",
     "respo_branch(log_w, alpha_neg, beta_neg, lambda_neg, log_w_max),\n                       respo_branch(log_w, alpha_pos, beta_pos, lambda_pos, log_w_max))"),
    ("power mean's weights swapped", KERNEL, "math.log(1.0 - beta) if beta < 1 else -math.inf)",
     "math.log(beta) if beta > 0 else -math.inf)"),
    ("power mean without its root", KERNEL, "return torch.logaddexp(on_one, on_w) / order", "return torch.logaddexp(on_one, on_w)"),
    ("geometric mean without its weight", KERNEL, "return beta * log_w  # [B]", "return log_w  # [B]"),
    ("tilt on W instead of phi_0", KERNEL, "torch.exp(log_phi0 - lam * torch.expm1(log_phi0))",
     "torch.exp(log_phi0 - lam * torch.expm1(log_w.clamp(-log_w_max, log_w_max)))"),
    ("tilt with its sign flipped", KERNEL, "torch.exp(log_phi0 - lam * torch.expm1(log_phi0))",
     "torch.exp(log_phi0 + lam * torch.expm1(log_phi0))"),
    ("log W not clamped below", KERNEL, "power_mean_log(log_w.clamp(-log_w_max, log_w_max), alpha, beta)",
     "power_mean_log(log_w.clamp(max=log_w_max), alpha, beta)"),
    ("the paper's tail at log W < 0", DIAGNOSTICS, "deep = pos & (true_log_w < -1.0)", "deep = pos & (true_log_w < 0.0)"),
    ("surrogate Phi without 1 / lambda", SURROGATE, "- torch.expm1(k * (1 - w)) / lam)", "- torch.expm1(k * (1 - w)))"),
    ("token mean where the sum belongs", KERNEL, "    if length_norm:\n        s = s / mask", "    if True:\n        s = s / mask"),
    ("tilt on w instead of w - 1", KERNEL, "lam * torch.expm1(log_w", "lam * torch.exp(log_w"),
    ("clip both sides with eps_low", KERNEL, "r > 1 + eps[1]", "r > 1 + eps[0]"),
    ("SAPO gate without the half", KERNEL, "torch.cosh(tau * (r - 1) / 2)", "torch.cosh(tau * (r - 1))"),
    ("dual clip on c instead of log c", KERNEL, "log_r > math.log(cfg.dual_clip_c)", "log_r > cfg.dual_clip_c"),
    ("CISPO clipped at eps instead of log(1 + eps)", KERNEL, "log_r.clamp(max=math.log1p(eps[1]))", "log_r.clamp(max=eps[1])"),
    ("TOPR truncation on positives", KERNEL, "torch.where(positive, torch.ones_like(log_w), torch.exp(log_w.clamp(max=0.0)))",
     "torch.where(positive, torch.exp(log_w.clamp(max=0.0)), torch.ones_like(log_w))"),
    ("surrogate Phi off by the e^lambda scale", SURROGATE, "scale = math.exp(lam - alpha", "scale = math.exp(- alpha"),
    ("E1 series sign", SURROGATE, "series = series - term / k", "series = series + term / k"),
    ("token-mean over sequences", KERNEL, "        return lengths.sum()", "        return (lengths > 0).sum()"),
    ("advantages not centred", KERNEL, "adv = grouped - grouped.mean(-1, keepdim=True)", "adv = grouped.clone()"),
    ("no log-space guard", KERNEL, "torch.exp(log_phi.clamp(max=log_w_max))", "torch.exp(log_phi)"),
    ("gspo's ratio not length-normalised", KERNEL, '"gspo":                (SEQUENCE, clip_coefficient,                (3e-4, 4e-4), True),',
     '"gspo":                (SEQUENCE, clip_coefficient,                (3e-4, 4e-4), False),'),
    ("plain IS truncated at 1", KERNEL, "return torch.exp(log_w.clamp(max=cfg.log_w_max))", "return torch.exp(log_w.clamp(max=0.0))"),
    ("empty responses divide by zero", KERNEL, "(terms.sum(-1) / mask.sum(-1).clamp(min=1))", "(terms.sum(-1) / mask.sum(-1))"),
    # docs/math.md §7, the decoupled form
    ("trust region on pi / mu, not pi / pi_old", KERNEL, "phi, log_w = coefficients(logp, pi_old_logp, advantages, mask, cfg)",
     "phi, log_w = coefficients(logp, old_logp, advantages, mask, cfg)"),
    ("correction weight left out", KERNEL, "return phi * correction_weight(pi_old_logp, old_logp, mask, cfg), log_w",
     "return phi, log_w"),
    ("truncation without its C_max", KERNEL, "if low > 0 else None, max=log_high))", "if low > 0 else None, max=cfg.log_w_max))"),
    ("mask keeps what lies outside the bounds", KERNEL, "torch.where(outside_bounds(log_rho, cfg), torch.zeros_like(log_rho),",
     "torch.where(outside_bounds(log_rho, cfg), torch.exp(log_rho.clamp(max=log_high)),"),
    ("sequence correction averaged, not summed", KERNEL, "return log_rho.sum(-1) if level == SEQUENCE else log_rho",
     "return log_rho.mean(-1) if level == SEQUENCE else log_rho"),
    ("token truncation capped at TRL's 3, not verl's 2", KERNEL, 'default_max = 2.0 if cfg.correction == "token-truncate" else 3.0',
     "default_max = 3.0"),
    ("sequence mask drops positives too", KERNEL, "return (~((advantages < 0) & (kl > delta))).to(dtype)",
     "return (~(kl > delta)).to(dtype)"),
]


def missing_sites() -> list[str]:
    """The mutants whose text is not exactly once in its file (the code moved on: update MUTANTS)."""
    return [f"{name}: {old!r} is not exactly once in {path}" for name, path, old, _ in MUTANTS
            if (ROOT / path).read_text().count(old) != 1]


def run_mutant(path: str, old: str, new: str, fail_fast: bool = False) -> tuple[bool, str]:
    """(caught, which test families failed) for one edit of `path`, tested on a copy of the package."""
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(ROOT / "nano_respo", Path(tmp) / "nano_respo")
        shutil.copytree(ROOT / "tests", Path(tmp) / "tests")
        (Path(tmp) / path).write_text((ROOT / path).read_text().replace(old, new))
        out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                              *(["-x"] if fail_fast else []), *TESTS],
                             cwd=tmp, env={**os.environ, "PYTHONPATH": tmp, "HYPOTHESIS_PROFILE": "quick"},
                             capture_output=True, text=True).stdout
    failed = sorted(set(re.findall(r"^FAILED (\S+)::(\w+)", out, re.M)))
    families = sorted({"8" if "numerics" in path else "§7" if "decoupled" in path
                       else FAMILIES.get(next((p for p in FAMILIES if name.startswith(p)), ""), "?") for path, name in failed})
    return bool(failed), (f"families {','.join(families) or '-'} ({len(failed)} tests: "
                          + ", ".join(name for _, name in failed) + ")")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("only", nargs="*", help="run only the mutants whose names contain one of these")
    parser.add_argument("--fail-fast", action="store_true", help="stop each test run at its first failure")
    parser.add_argument("--workers", type=int, default=1, help="test runs at a time (one core each)")
    args = parser.parse_args(argv)
    missing = missing_sites()
    if missing:
        print("mutation sites not found (the code changed; update MUTANTS in tools/mutation_check.py):\n  "
              + "\n  ".join(missing))
        return 2
    chosen = [m for m in MUTANTS if not args.only or any(o in m[0] for o in args.only)]
    survived = 0
    with concurrent.futures.ThreadPoolExecutor(max(1, args.workers)) as pool:  # each run is a process of its own
        verdicts = pool.map(lambda m: run_mutant(*m[1:], args.fail_fast), chosen)
        for (name, *_), (caught, detail) in zip(chosen, verdicts):  # printed in MUTANTS' order as they finish
            survived += not caught
            print(f"{'caught' if caught else 'SURVIVED':8s} {name:45s} {detail}", flush=True)
    print(f"{survived} of {len(chosen)} mutants survived" if survived
          else f"every mutant was caught ({len(chosen)} of {len(chosen)})")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())

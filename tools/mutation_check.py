"""Break the kernel on purpose and check that the derivation tests notice.

    python tools/mutation_check.py              # every mutant, one kernel test run each
    python tools/mutation_check.py tilt SAPO    # only the mutants whose names contain these
    python tools/mutation_check.py --fail-fast --workers 2  # each test run stops at its first failure,
                                                            # two at a time (what CI runs)

Each mutant is one textual edit of nano_respo/kernel.py (its §6 diagnostics included) or of the
surrogate the tests compare it with, nano_respo/surrogate.py, applied to a temporary copy of the package; the kernel
tests run against the copy and the families that fail are printed. A mutant that no test
catches is a hole in the suite. The property tests run with the quick profile (tests/conftest.py),
what a user's `python -m pytest -q` runs, so a mutant must be caught with the fewer examples. Every
site is looked up before any test runs: one the code no longer holds stops the check (exit 2),
naming it. Exit 0 only when every mutant is caught.

Each test run is a child forked from this process after it has imported torch, pytest and hypothesis (never the
package or the tests: the child imports the mutated copy's), so a run costs its tests, not an interpreter's start;
where os.fork is missing each run is a fresh interpreter. With --fail-fast the test that catches a mutant soonest
(CATCHER) runs first and the rest of the kernel tests after it, so a mutant it misses still meets the whole tier.
"""

import argparse
import concurrent.futures
import importlib
import importlib.metadata
import os
import random
import re
import shutil
import signal
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
KERNEL, SURROGATE = "nano_respo/kernel.py", "nano_respo/surrogate.py"
MUTANTS = [
    ("flip the sign of the loss", KERNEL, "terms = -(phi * advantages", "terms = (phi * advantages"),
    ("drop the tilt", KERNEL, "log_phi = alpha * log_w - lam * torch.expm1", "log_phi = alpha * log_w - 0 * torch.expm1"),
    ("swap VESPO's branches", KERNEL, "power_tilt(log_w, cfg.vespo_k_pos, cfg.vespo_lambda_pos, cfg.log_w_max),\n                       power_tilt(log_w, cfg.vespo_k_neg, cfg.vespo_lambda_neg, cfg.log_w_max))",
     "power_tilt(log_w, cfg.vespo_k_neg, cfg.vespo_lambda_neg, cfg.log_w_max),\n                       power_tilt(log_w, cfg.vespo_k_pos, cfg.vespo_lambda_pos, cfg.log_w_max))"),
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
    ("the paper's tail at log W < 0", KERNEL, "deep = pos & (true_log_w < -1.0)", "deep = pos & (true_log_w < 0.0)"),
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

# mutant -> the one test of TESTS to run first under --fail-fast: a quick one that fails on it (chosen from what
# `python tools/mutation_check.py` lists as failing). Only the order changes: the rest of TESTS run after it.
CATCHER = {
    'flip the sign of the loss': 'test_policy_loss_with_the_default_config_is_the_published_token_mean_loss',
    'drop the tilt': 'test_positive_branch_keeps_low_w_positives',
    "swap VESPO's branches": 'test_positive_branch_keeps_low_w_positives',
    "swap ReSPO's branches": 'test_the_default_coefficient_equals_the_published_closed_forms_on_a_grid_of_log_w',
    "power mean's weights swapped": 'test_phi_0_is_a_power_mean_between_1_and_w_and_grows_with_its_order',
    'power mean without its root': 'test_phi_0_is_a_power_mean_between_1_and_w_and_grows_with_its_order',
    'geometric mean without its weight': 'test_the_default_coefficient_equals_the_published_closed_forms_on_a_grid_of_log_w',
    'tilt on W instead of phi_0': 'test_the_default_coefficient_equals_the_published_closed_forms_on_a_grid_of_log_w',
    'tilt with its sign flipped': 'test_the_default_coefficient_equals_the_published_closed_forms_on_a_grid_of_log_w',
    'log W not clamped below': 'test_log_w_is_clamped_to_plus_minus_20_as_the_published_code_does',
    "the paper's tail at log W < 0": 'test_diagnostics_on_a_hand_sized_batch',
    'surrogate Phi without 1 / lambda': 'test_the_loss_gradient_is_the_gradient_of_the_surrogate_objective',
    'token mean where the sum belongs': 'test_alpha_divergence_identity',
    'tilt on w instead of w - 1': 'test_positive_branch_keeps_low_w_positives',
    'clip both sides with eps_low': 'test_baseline_coefficient_is_its_surrogate_gradient',
    'SAPO gate without the half': 'test_baseline_coefficient_is_its_surrogate_gradient',
    'dual clip on c instead of log c': 'test_baseline_coefficient_is_its_surrogate_gradient',
    'CISPO clipped at eps instead of log(1 + eps)': 'test_baseline_coefficient_is_its_surrogate_gradient',
    'TOPR truncation on positives': 'test_baseline_coefficient_is_its_surrogate_gradient',
    'surrogate Phi off by the e^lambda scale': 'test_baseline_coefficient_is_its_surrogate_gradient',
    'E1 series sign': 'test_the_loss_gradient_is_the_gradient_of_the_surrogate_objective',
    'token-mean over sequences': 'test_aggregation_modes_match_their_definitions',
    'advantages not centred': 'test_group_advantages_centre_scale_and_count_zero_variance_groups',
    'no log-space guard': 'test_loss_and_gradient_are_finite_for_every_finite_input',
    "gspo's ratio not length-normalised": 'test_baseline_coefficient_is_its_surrogate_gradient',
    'plain IS truncated at 1': 'test_corners',
    'empty responses divide by zero': 'test_aggregation_modes_match_their_definitions',
    'trust region on pi / mu, not pi / pi_old': 'test_an_unbounded_correction_on_plain_is_is_the_coupled_weight',
    'correction weight left out': 'test_an_unbounded_correction_on_plain_is_is_the_coupled_weight',
    'truncation without its C_max': 'test_each_correction_is_the_gradient_of_the_methods_surrogate_weighted_by_c',
    'mask keeps what lies outside the bounds': 'test_each_correction_is_the_gradient_of_the_methods_surrogate_weighted_by_c',
    'sequence correction averaged, not summed': 'test_the_weight_is_the_trust_region_ratio_times_the_correction_ratio',
    "token truncation capped at TRL's 3, not verl's 2": 'test_each_correction_is_the_gradient_of_the_methods_surrogate_weighted_by_c',
    'sequence mask drops positives too': 'test_the_off_policy_sequence_mask_drops_exactly_the_far_negatives',
}


def missing_sites() -> list[str]:
    """The mutants whose text is not exactly once in its file (the code moved on: update MUTANTS)."""
    return [f"{name}: {old!r} is not exactly once in {path}" for name, path, old, _ in MUTANTS
            if (ROOT / path).read_text().count(old) != 1]


def copy_with_mutant(tmp: str, path: str, old: str, new: str) -> None:
    shutil.copytree(ROOT / "nano_respo", Path(tmp) / "nano_respo")
    shutil.copytree(ROOT / "tests", Path(tmp) / "tests")
    (Path(tmp) / path).write_text((ROOT / path).read_text().replace(old, new))


def pytest_args(fail_fast: bool) -> list[str]:
    return ["-q", "-p", "no:cacheprovider", *(["-x"] if fail_fast else []), *TESTS]


def verdict(out: str) -> tuple[bool, str]:
    """(caught, which test families failed) from pytest's output."""
    failed = sorted(set(re.findall(r"^FAILED (\S+)::(\w+)", out, re.M)))
    families = sorted({"8" if "numerics" in path else "§7" if "decoupled" in path
                       else FAMILIES.get(next((p for p in FAMILIES if name.startswith(p)), ""), "?") for path, name in failed})
    return bool(failed), (f"families {','.join(families) or '-'} ({len(failed)} tests: "
                          + ", ".join(name for _, name in failed) + ")")


def run_mutant(path: str, old: str, new: str, fail_fast: bool = False) -> tuple[bool, str]:
    """(caught, which test families failed) for one edit of `path`, tested on a copy of the package in a fresh
    interpreter."""
    with tempfile.TemporaryDirectory() as tmp:
        copy_with_mutant(tmp, path, old, new)
        out = subprocess.run([sys.executable, "-m", "pytest", *pytest_args(fail_fast)],
                             cwd=tmp, env={**os.environ, "PYTHONPATH": tmp, "HYPOTHESIS_PROFILE": "quick"},
                             capture_output=True, text=True).stdout
    return verdict(out)


class CatcherFirst:
    """A pytest plugin: the test named (each of its cases) runs first, the rest of the collection after it in its
    own order."""

    def __init__(self, name: str | None):
        self.name = name

    def pytest_collection_modifyitems(self, items):
        items.sort(key=lambda item: item.originalname != self.name)  # a stable sort


def fork_test_run(tmp: str, first: str | None, fail_fast: bool) -> int:
    """The pid of a child that runs the kernel tests on the copy in tmp, as `python -m pytest` run there would
    (PYTHONPATH=tmp, the quick profile), its output in tmp/pytest.out."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 3
    try:
        out = os.open(os.path.join(tmp, "pytest.out"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.chdir(tmp)
        outside = {"", str(ROOT / "tools"), *os.environ.get("PYTHONPATH", "").split(os.pathsep)}
        sys.path[:] = [tmp, *(p for p in sys.path if p not in outside)]  # as PYTHONPATH=tmp in place of the user's
        os.environ.update(PYTHONPATH=tmp, HYPOTHESIS_PROFILE="quick")
        random.seed()  # a fresh seed as a fresh interpreter has, not the state every run would share
        import pytest
        code = pytest.main(pytest_args(fail_fast), plugins=[CatcherFirst(first if fail_fast else None)])
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(code))  # never the parent's exit handlers (they would remove the other runs' copies)


def preload() -> None:
    """What every test run imports first and no mutant touches: torch, hypothesis, pytest and pytest's plugins."""
    for module in ("torch", "hypothesis", "pytest"):
        importlib.import_module(module)
    for entry in importlib.metadata.entry_points(group="pytest11"):
        try:
            importlib.import_module(entry.value.partition(":")[0])
        except Exception:  # pytest reports a plugin that does not load; this is only a head start
            pass


def verdicts(chosen: list, fail_fast: bool, workers: int):
    """(caught, detail) of each mutant in `chosen`, in its order, `workers` test runs at a time."""
    if not hasattr(os, "fork"):
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:  # each run is a process of its own
            yield from pool.map(lambda m: run_mutant(*m[1:], fail_fast), chosen)
        return
    preload()
    waiting, running, done, shown = list(enumerate(chosen)), {}, {}, 0
    try:
        while shown < len(chosen):
            while waiting and len(running) < workers:
                i, (name, path, old, new) = waiting.pop(0)
                tmp = tempfile.mkdtemp(prefix="mutant-")
                copy_with_mutant(tmp, path, old, new)
                running[fork_test_run(tmp, CATCHER.get(name), fail_fast)] = i, tmp
            i, tmp = running.pop(os.wait()[0])
            done[i] = verdict(Path(tmp, "pytest.out").read_text())
            shutil.rmtree(tmp)
            while shown in done:
                yield done.pop(shown)
                shown += 1
    finally:  # interrupted: the runs still going are stopped and their copies removed
        for pid, (_, tmp) in running.items():
            os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)
            shutil.rmtree(tmp, ignore_errors=True)


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
    for (name, *_), (caught, detail) in zip(chosen, verdicts(chosen, args.fail_fast, max(1, args.workers))):
        survived += not caught  # printed in MUTANTS' order as they finish
        print(f"{'caught' if caught else 'SURVIVED':8s} {name:45s} {detail}", flush=True)
    print(f"{survived} of {len(chosen)} mutants survived" if survived
          else f"every mutant was caught ({len(chosen)} of {len(chosen)})")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())

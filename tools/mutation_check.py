"""Break the kernel on purpose and check that the derivation tests notice.

    python tools/mutation_check.py            # all mutants, ~1 minute each on one core
    python tools/mutation_check.py tilt SAPO  # only the mutants whose names contain these

Each mutant is one textual edit of nano_respo/kernel.py, applied to a temporary copy of the
package; the kernel tests run against the copy and the families that fail are printed. A
mutant that no test catches is a hole in the suite.
"""

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ["tests/test_kernel_derivations.py", "tests/test_kernel_numerics.py"]
FAMILIES = {  # test-name prefix -> its family number in tests/test_kernel_derivations.py's docstring
    "test_on_policy": "1", "test_baseline": "2", "test_clip_table": "2", "test_surrogate": "3",
    "test_corners": "4", "test_alpha_divergence": "5", "test_variational": "6",
    "test_positive_branch": "7", "test_negative_branch": "7", "test_aggregation": "agg",
}
MUTANTS = [
    ("flip the sign of the loss", "terms = -(phi * advantages", "terms = (phi * advantages"),
    ("drop the tilt", "log_phi = alpha * log_w - lam * torch.expm1", "log_phi = alpha * log_w - 0 * torch.expm1"),
    ("swap the branches", "power_tilt(log_w, alpha_pos, lambda_pos, log_w_max),\n                       power_tilt(log_w, alpha_neg, lambda_neg, log_w_max))",
     "power_tilt(log_w, alpha_neg, lambda_neg, log_w_max),\n                       power_tilt(log_w, alpha_pos, lambda_pos, log_w_max))"),
    ("token mean where the sum belongs", "    if length_norm:\n        s = s / mask", "    if True:\n        s = s / mask"),
    ("tilt on w instead of w - 1", "lam * torch.expm1(log_w", "lam * torch.exp(log_w"),
    ("clip both sides with eps_low", "r > 1 + eps[1]", "r > 1 + eps[0]"),
    ("SAPO gate without the half", "torch.cosh(tau * (r - 1) / 2)", "torch.cosh(tau * (r - 1))"),
    ("dual clip on c instead of log c", "log_r > math.log(cfg.dual_clip_c)", "log_r > cfg.dual_clip_c"),
    ("CISPO clipped at eps instead of log(1 + eps)", "log_r.clamp(max=math.log1p(eps[1]))", "log_r.clamp(max=eps[1])"),
    ("TOPR truncation on positives", "torch.where(positive, torch.ones_like(log_w), torch.exp(log_w.clamp(max=0.0)))",
     "torch.where(positive, torch.exp(log_w.clamp(max=0.0)), torch.ones_like(log_w))"),
    ("surrogate Phi off by the e^lambda scale", "scale = math.exp(lam - alpha", "scale = math.exp(- alpha"),
    ("E1 series sign", "series = series - term / k", "series = series + term / k"),
    ("token-mean over sequences", "return terms.sum() / lengths.sum().clamp(min=1)", "return terms.sum() / n_seq"),
    ("advantages not centred", "adv = grouped - grouped.mean(-1, keepdim=True)", "adv = grouped.clone()"),
    ("no log-space guard", "torch.exp(log_phi.clamp(max=log_w_max))", "torch.exp(log_phi)"),
    ("plain IS truncated at 1", "return torch.exp(log_w.clamp(max=cfg.log_w_max))", "return torch.exp(log_w.clamp(max=0.0))"),
    ("empty responses divide by zero", "(terms.sum(-1) / lengths.clamp(min=1))", "(terms.sum(-1) / lengths)"),
]


def run_mutant(old: str, new: str) -> tuple[str, list[str]]:
    source = (ROOT / "nano_respo/kernel.py").read_text()
    if source.count(old) != 1:
        return "mutation site not found (kernel changed?)", []
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(ROOT / "nano_respo", Path(tmp) / "nano_respo")
        shutil.copytree(ROOT / "tests", Path(tmp) / "tests")
        (Path(tmp) / "nano_respo/kernel.py").write_text(source.replace(old, new))
        out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS],
                             cwd=tmp, capture_output=True, text=True).stdout
    failed = sorted(set(re.findall(r"^FAILED (\S+)::(\w+)", out, re.M)))
    families = sorted({"8" if "numerics" in path else FAMILIES.get(next((p for p in FAMILIES if name.startswith(p)), ""), "?")
                       for path, name in failed})
    return ("caught" if failed else "SURVIVED"), [f"families {','.join(families) or '-'} ({len(failed)} tests:",
                                                 ", ".join(name for _, name in failed) + ")"]


if __name__ == "__main__":
    only = sys.argv[1:]  # optional substrings of mutant names
    survived = 0
    for name, old, new in [m for m in MUTANTS if not only or any(o in m[0] for o in only)]:
        verdict, detail = run_mutant(old, new)
        survived += verdict != "caught"
        print(f"{verdict:8s} {name:45s} {' '.join(detail)}", flush=True)
    print(f"{survived} mutant(s) survived" if survived else "every mutant was caught")
    sys.exit(1 if survived else 0)

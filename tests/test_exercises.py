"""Each exercise check accepts the solutions and rejects wrong answers, with a hint."""

import importlib.util
import math
from pathlib import Path

import pytest
import torch

NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"
spec = importlib.util.spec_from_file_location("checks", NOTEBOOKS_DIR / "checks.py")
checks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(checks)


# --- Exercise 1: SAPO's coefficient ---------------------------------------------------

def sapo_right(log_r, positive):
    r = torch.exp(log_r)
    return r / torch.cosh(checks.SAPO_TAU[positive] * (r - 1) / 2) ** 2


SAPO_WRONG = {
    "plain importance weight": lambda log_r, positive: torch.exp(log_r),
    "gate without the half": lambda log_r, positive:
        torch.exp(log_r) / torch.cosh(checks.SAPO_TAU[positive] * (torch.exp(log_r) - 1)) ** 2,
    "one tau for both signs": lambda log_r, positive: torch.exp(log_r) / torch.cosh((torch.exp(log_r) - 1) / 2) ** 2,
    "the gate's value, not its slope": lambda log_r, positive: 4 * torch.sigmoid(torch.exp(log_r) - 1),
    "a stub": lambda log_r, positive: None,
}


# --- Exercise 2: phi in log space -----------------------------------------------------

def phi_right(log_w, alpha, lam):
    return torch.exp((alpha * log_w - lam * torch.expm1(log_w.clamp(max=20.0))).clamp(max=20.0))


PHI_WRONG = {
    "direct formula (nan at log w = 1e4)": lambda s, a, lam: torch.exp(s) ** a * torch.exp(-lam * (torch.exp(s) - 1)),
    "log space without caps (inf at the IS corner)": lambda s, a, lam: torch.exp(a * s - lam * torch.expm1(s)),
    "tilt on w instead of w - 1": lambda s, a, lam:
        torch.exp((a * s - lam * torch.exp(s.clamp(max=20.0))).clamp(max=20.0)),
    "cap that changes moderate values": lambda s, a, lam:
        torch.exp((a * s - lam * torch.expm1(s.clamp(max=1.0))).clamp(max=20.0)),
    "a stub that raises": lambda s, a, lam: (_ for _ in ()).throw(NotImplementedError("todo")),
}


# --- Exercise 3: the peak -------------------------------------------------------------

def peak_right(alpha, lam):
    return alpha / lam, (alpha / lam) ** alpha * math.exp(lam - alpha)


PEAK_WRONG = {
    "w* upside down": lambda a, lam: (lam / a, (lam / a) ** a * math.exp(lam - a)),
    "height without the tilt": lambda a, lam: (a / lam, (a / lam) ** a),
    "height at w = 1": lambda a, lam: (a / lam, 1.0),
    "not a pair": lambda a, lam: a / lam,
}


@pytest.mark.parametrize("check,right,wrong", [
    (checks.check_sapo_coefficient, sapo_right, SAPO_WRONG),
    (checks.check_log_space_phi, phi_right, PHI_WRONG),
    (checks.check_negative_peak, peak_right, PEAK_WRONG),
], ids=["sapo_coefficient", "log_space_phi", "negative_peak"])
def test_check_accepts_the_solution_and_rejects_each_wrong_answer(check, right, wrong, capsys):
    assert check(right) is True
    assert capsys.readouterr().out.startswith("✓ right")
    for name, answer in wrong.items():
        assert check(answer) is False, f"the check accepted a wrong answer: {name}"
        out = capsys.readouterr().out
        assert "✗ not yet" in out and "Hint:" in out


def test_the_real_kernel_has_every_property():
    assert all(prop(checks.kernel) for prop in checks.PROPERTIES.values())


@pytest.mark.parametrize("name", sorted(checks.MUTANTS))
def test_mutant_check_accepts_only_properties_that_catch_it(name, capsys):
    broken = checks.mutant(name)
    catching = [p for p, prop in checks.PROPERTIES.items() if not prop(broken)]
    assert catching, f"no property catches {name}: the exercise would have no answer"
    for property_name in checks.PROPERTIES:
        assert checks.check_mutant(name, property_name) is (property_name in catching)
    assert checks.check_mutant(name, "not a property") is False
    assert "Hint:" in capsys.readouterr().out


def test_the_solutions_notebook_passes_every_check_and_the_exercises_notebook_none():
    build_spec = importlib.util.spec_from_file_location("notebook_build", NOTEBOOKS_DIR / "build.py")
    build = importlib.util.module_from_spec(build_spec)
    build_spec.loader.exec_module(build)
    for name, expect_right in (("exercises_solutions.py", True), ("exercises.py", False)):
        nb = build.execute(build.from_source(NOTEBOOKS_DIR / name))
        lines = [line for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", [])
                 if out["output_type"] == "stream" for line in out["text"].splitlines()
                 if line.startswith(("✓", "✗"))]
        assert len(lines) == 3 + len(checks.MUTANTS), lines
        assert all(line.startswith("✓" if expect_right else "✗") for line in lines), lines

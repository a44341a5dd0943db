"""Each exercise check accepts the solutions and rejects wrong answers, with a hint."""

import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch

NOTEBOOKS_DIR = Path(__file__).resolve().parents[2] / "notebooks"
course_spec = importlib.util.spec_from_file_location("course", NOTEBOOKS_DIR / "course.py")
course = importlib.util.module_from_spec(course_spec)
course_spec.loader.exec_module(course)
sys.modules.setdefault("course", course)  # checks.py imports it as the notebooks do, from notebooks/
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


# --- Exercise 4: the E1 case of Phi -------------------------------------------------------

def e1_right(log_w, lam):
    return math.exp(lam) * (checks.exp1(torch.full_like(log_w, lam)) - checks.exp1(lam * torch.exp(log_w)))


E1_WRONG = {
    "without the constant e^lambda": lambda s, lam:
        checks.exp1(torch.full_like(s, lam)) - checks.exp1(lam * torch.exp(s)),
    "the two E1 terms swapped": lambda s, lam:
        math.exp(lam) * (checks.exp1(lam * torch.exp(s)) - checks.exp1(torch.full_like(s, lam))),
    "lambda forgotten inside E1": lambda s, lam:
        math.exp(lam) * (checks.exp1(torch.ones_like(s)) - checks.exp1(torch.exp(s))),
    "log w (the lambda = 0 case)": lambda s, lam: s * 1.0,
    "a detached value": lambda s, lam: e1_right(s, lam).detach(),
}


# --- Exercise 5: the baseline term ---------------------------------------------------------

BASELINE_WRONG = {
    "sign flipped": lambda b, a, d: -b * (1 - a) * d,
    "alpha (1 - alpha) as in E_mu[w^alpha]": lambda b, a, d: b * a * (1 - a) * d,
    "the baseline ignored": lambda b, a, d: 0.0,
    "without b": lambda b, a, d: (1 - a) * d,
}


@pytest.mark.parametrize("check,right,wrong", [
    (checks.check_sapo_coefficient, sapo_right, SAPO_WRONG),
    (checks.check_log_space_phi, phi_right, PHI_WRONG),
    (checks.check_negative_peak, peak_right, PEAK_WRONG),
    (checks.check_e1_surrogate, e1_right, E1_WRONG),
    (checks.check_baseline_term, lambda b, a, d: b * (1 - a) * d, BASELINE_WRONG),
], ids=["sapo_coefficient", "log_space_phi", "negative_peak", "e1_surrogate", "baseline_term"])
def test_check_accepts_the_solution_and_rejects_each_wrong_answer(check, right, wrong, capsys):
    assert check(right) is True
    assert capsys.readouterr().out.startswith("✓ right")
    for name, answer in wrong.items():
        assert check(answer) is False, f"the check accepted a wrong answer: {name}"
        out = capsys.readouterr().out
        assert "✗ not yet" in out and "Hint:" in out


def test_no_message_prints_a_solution(capsys):
    """A failure gives a hint, never the answer: no verdict shows the closed forms the solutions use."""
    for check, wrong in ((checks.check_negative_peak, PEAK_WRONG["w* upside down"]),
                         (checks.check_e1_surrogate, E1_WRONG["the two E1 terms swapped"]),
                         (checks.check_baseline_term, BASELINE_WRONG["sign flipped"]),
                         (checks.check_log_space_phi, PHI_WRONG["tilt on w instead of w - 1"]),
                         (checks.check_sapo_coefficient, SAPO_WRONG["plain importance weight"])):
        check(wrong)
    out = capsys.readouterr().out.replace(" ", "")
    for solution in ("alpha/lambda", "alpha/lam", "(1-alpha)D", "b(1-alpha)", "E1(lambda)-E1", "E1(lam)",
                     "cosh^2", "1/(4cosh", "expm1", "clamp", "alpha*s-lam"):
        assert solution not in out, f"a failure message shows part of a solution: {solution}"


def test_the_real_kernel_has_every_property():
    assert all(prop(checks.kernel) for prop in checks.PROPERTIES.values())


@pytest.mark.parametrize("name", sorted(checks.MUTANTS))
def test_mutant_check_wants_a_catching_property_and_the_mutants_value(name, capsys):
    broken = checks.mutant(name)
    catching = [p for p, prop in checks.PROPERTIES.items() if not prop(broken)]
    assert catching, f"no property catches {name}: the exercise would have no answer"
    for property_name in checks.PROPERTIES:
        value = checks._reading(property_name, broken)
        assert checks.check_mutant(name, property_name, value) is (property_name in catching)
    for property_name in catching:
        real = checks._reading(property_name, checks.kernel)
        assert checks.check_mutant(name, property_name, real) is False, "the real kernel's value was accepted"
        assert checks.check_mutant(name, property_name, None) is False
        assert checks.check_mutant(name, property_name, "?") is False
    # looping over the property names with any one guessed value finds nothing
    for guess in (0.0, 1.0, float("inf"), float("nan")):
        assert not any(checks.check_mutant(name, p, guess) for p in checks.PROPERTIES
                       if not checks.same_number(guess, checks._reading(p, broken)))
    assert checks.check_mutant(name, "not a property", 1.0) is False
    assert "Hint:" in capsys.readouterr().out


def test_same_number_tells_nan_inf_and_values_apart():
    inf, nan = float("inf"), float("nan")
    assert checks.same_number(nan, nan) and checks.same_number(-inf, -inf) and checks.same_number(1.0, 1.0 + 1e-9)
    assert not (checks.same_number(inf, -inf) or checks.same_number(nan, 1.0) or checks.same_number(1.0, 1.01))


def test_the_solutions_notebook_passes_every_check_and_the_exercises_notebook_none():
    build_spec = importlib.util.spec_from_file_location("notebook_build", NOTEBOOKS_DIR / "build.py")
    build = importlib.util.module_from_spec(build_spec)
    build_spec.loader.exec_module(build)
    for name, expect_right in (("exercises_solutions.py", True), ("exercises.py", False)):
        nb = build.execute(build.from_source(NOTEBOOKS_DIR / name))
        lines = [line for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", [])
                 if out["output_type"] == "stream" for line in out["text"].splitlines()
                 if line.startswith(("✓", "✗"))]
        assert len(lines) == 5 + len(checks.MUTANTS), lines
        assert all(line.startswith("✓" if expect_right else "✗") for line in lines), lines

"""The check cells of notebooks/exercises.ipynb: each grades an answer by autograd or by the kernel.

Every check prints one line, ✓ (right) or ✗ with a hint, and returns True or False; none
raises on a wrong answer, so the exercises notebook runs top to bottom before it is solved.
The ground truth is never a stored number: it is autograd of a surrogate, a dense grid of
the kernel, or a property run against the real kernel and a broken copy of it.
"""

from __future__ import annotations

import inspect
import math
import sys
import types

import torch

from course import SequenceSpace
from nano_respo import kernel
from nano_respo.kernel import LossConfig
from nano_respo.surrogate import exp1

SAPO_TAU = {True: 1.0, False: 1.05}  # SAPO's gate temperatures for A > 0 and A < 0 (docs/math.md §5)


def verdict(ok: bool, what: str, hint: str) -> bool:
    print(f"✓ right: {what}" if ok else f"✗ not yet: {what}. Hint: {hint}")
    return ok


def attempt(fn, *args):
    """The answer's value, or None when it raises (a stub, a typo): a wrong answer, not a crash."""
    try:
        return fn(*args)
    except Exception as error:  # any failure of the reader's code is graded, not propagated
        print(f"  (your function raised {type(error).__name__}: {error})")
        return None


# --- Exercise 1: a coefficient from its surrogate --------------------------------------

def sapo_surrogate(log_r: torch.Tensor, advantage: float) -> torch.Tensor:
    """SAPO's per-token objective: (4 / tau) * sigmoid(tau (r - 1)) * A, with r = exp(log_r)."""
    tau = SAPO_TAU[advantage > 0]
    return 4 / tau * torch.sigmoid(tau * (torch.exp(log_r) - 1)) * advantage


def check_sapo_coefficient(coefficient) -> bool:
    """coefficient(log_r, positive) must equal phi with d J / d log pi = phi * A (autograd of sapo_surrogate)."""
    log_r = torch.linspace(-3.0, 2.5, 301, dtype=torch.float64)
    ok = True
    for advantage in (1.0, -1.0):
        x = log_r.clone().requires_grad_(True)
        (slope,) = torch.autograd.grad(sapo_surrogate(x, advantage).sum(), x)  # dJ/dlog pi = phi A
        answer = attempt(coefficient, log_r.clone(), advantage > 0)
        ok &= answer is not None and torch.is_tensor(answer) and answer.shape == log_r.shape and \
            torch.allclose(answer.double(), slope / advantage, rtol=1e-6, atol=1e-9)
        if not ok:
            break
    return verdict(ok, "SAPO's coefficient is the derivative of its surrogate in log r, divided by A",
                   "differentiate J in log r (the chain rule through r = exp(log r)), write the sigmoid's "
                   "derivative with a cosh, and mind tau for each sign.")


# --- Exercise 2: phi in log space ----------------------------------------------------------

def check_log_space_phi(phi) -> bool:
    """phi(log_w, alpha, lam) = w^alpha exp(-lam (w - 1)): exact where representable, finite everywhere."""
    ok = True
    moderate = torch.linspace(-8.0, 3.0, 221, dtype=torch.float64)
    extreme = torch.tensor([-1e4, -800.0, -50.0, 50.0, 800.0, 1e4], dtype=torch.float64)
    for alpha, lam in ((0.0, 0.1), (3.0, 2.0), (0.5, 0.0), (1.0, 0.0), (2.0, 3.0)):
        exact = torch.exp(alpha * moderate - lam * torch.expm1(moderate))
        got = attempt(phi, moderate.clone(), alpha, lam)
        ok &= got is not None and torch.is_tensor(got) and torch.allclose(got.double(), exact, rtol=1e-9, atol=1e-300)
        got = attempt(phi, extreme.clone(), alpha, lam)
        ok &= got is not None and torch.is_tensor(got) and bool(got.isfinite().all()) and bool((got >= 0).all())
        if ok and lam > 0:
            ok &= bool(got[3:].max() < 1e-30)  # the tilt sends the weight of w = e^50 and beyond to 0
        if ok and alpha == 0:
            ok &= math.isclose(got[0].item(), math.exp(lam), rel_tol=1e-9)  # the limit e^lambda as w -> 0
        if not ok:
            break
    return verdict(ok, "phi is exact where w^alpha is representable and finite for every finite log w",
                   "exp(1e4) is inf and inf * 0 is nan: work with log phi instead of phi, and make sure no "
                   "exp() ever sees an argument large enough to overflow.")


# --- Exercise 3: the peak of the negative branch -----------------------------------------

def check_negative_peak(peak) -> bool:
    """peak(alpha, lam) -> (w_star, phi_max), against a dense grid of the kernel's power_tilt."""
    grid = torch.linspace(-6.0, 5.0, 400001, dtype=torch.float64)
    ok = True
    for alpha, lam in ((3.0, 2.0), (2.0, 3.0), (1.0, 0.5), (4.0, 1.0)):
        phi = kernel.power_tilt(grid, alpha, lam)
        answer = attempt(peak, alpha, lam)
        try:
            w_star, phi_max = (float(v) for v in answer)
        except (TypeError, ValueError):
            ok = False
            break
        ok &= abs(w_star - grid[phi.argmax()].exp().item()) < 1e-3 * max(1.0, w_star) and \
            abs(phi_max - phi.max().item()) < 1e-6 * max(1.0, phi_max)
        if not ok:
            break
    return verdict(ok, "(w*, phi_max) of the negative branch, for four (alpha, lambda)",
                   "log phi has the same maximiser as phi and is easier to differentiate; then evaluate phi "
                   "itself (not log phi) at the maximiser.")


# --- Exercise 4: the E1 case of Phi ----------------------------------------------------

def check_e1_surrogate(surrogate) -> bool:
    """surrogate(log_w, lam) = Phi(w) at alpha = 0: d Phi / d log w = exp(-lam (w - 1)) (autograd), Phi(1) = 0."""
    log_w = torch.linspace(-6.0, 2.0, 161, dtype=torch.float64)
    ok = True
    for lam in (0.1, 0.5, 2.0):
        x = log_w.clone().requires_grad_(True)
        value = attempt(surrogate, x, lam)
        ok &= torch.is_tensor(value) and value.shape == log_w.shape and value.requires_grad
        if ok:
            (slope,) = torch.autograd.grad(value.sum(), x)
            ok &= torch.allclose(slope, kernel.power_tilt(log_w, 0.0, lam), rtol=1e-7, atol=1e-10)
            at_one = attempt(surrogate, torch.zeros(1, dtype=torch.float64), lam)
            ok &= torch.is_tensor(at_one) and abs(at_one.item()) < 1e-10
        if not ok:
            break
    return verdict(ok, "Phi(w) = int_1^w exp(-lambda (u - 1)) du / u in closed form (autograd gives phi, Phi(1) = 0)",
                   "substitute v = lambda u in the integral, split it at infinity, and compare each piece with "
                   "the definition E1(z) = int_z^inf e^-v / v dv; keep the constant in front.")


# --- Exercise 5: the baseline term of J_alpha --------------------------------------------

def baseline_space():
    """One prompt's exact world: (mu [N], pi [N], reward [N]) on 27 responses, pi a drifted mu."""
    space = SequenceSpace(vocab=3, length=3)
    gen = torch.Generator().manual_seed(5)
    theta_mu = space.random_theta(gen)
    log_mu = space.log_probs(theta_mu)
    log_pi = space.log_probs(theta_mu + 0.7 * space.random_theta(gen))
    return log_mu.exp(), log_pi.exp(), (space.seqs.sum(-1) >= 4).double()


def check_baseline_term(term) -> bool:
    """term(b, alpha, d_alpha) = E_mu[(r - b) Phi_alpha(w)] - E_mu[r Phi_alpha(w)], by enumeration."""
    mu, pi, reward = baseline_space()
    w = pi / mu
    ok = True
    for alpha in (0.25, 0.5, 1.5, 3.0):
        phi_alpha = (w ** alpha - 1) / alpha                                   # lambda = 0: Phi = (w^a - 1) / a
        d_alpha = (mu * (w ** alpha - 1 - alpha * (w - 1))).sum() / (alpha * (alpha - 1))
        for b in (0.3, 0.8):
            truth = ((mu * (reward - b) * phi_alpha).sum() - (mu * reward * phi_alpha).sum()).item()
            answer = attempt(term, b, alpha, d_alpha.item())
            try:
                ok &= math.isclose(float(answer), truth, rel_tol=1e-9, abs_tol=1e-12)
            except (TypeError, ValueError):
                ok = False
        if not ok:
            break
    return verdict(ok, "the baseline's term in J_alpha, as a function of b, alpha and D_alpha",
                   "the b part of E_mu[(r - b)(w^alpha - 1) / alpha] only needs E_mu[w^alpha]; write that with "
                   "D_alpha (notebooks/deeper/derivation_details §4), and check the sign for alpha above and below 1.")


# --- Exercise 6: the silent bug -----------------------------------------------------------
# Each mutant is one textual edit of nano_respo/kernel.py (the kind tools/mutation_check.py
# makes); no error is raised by any of them, the loss still trains. The reader names a
# property that catches each one, and the number that property reads off the mutant: a
# value only a call on the mutant gives, so looping over the property names finds nothing.

MUTANTS = {
    "mutant_a": ("log_phi0 - lam * torch.expm1(log_phi0)", "log_phi0 - lam * torch.exp(log_phi0)"),
    "mutant_b": ("respo_branch(log_w, alpha_pos, beta_pos, lambda_pos, log_w_max),\n                       "
                 "respo_branch(log_w, alpha_neg, beta_neg, lambda_neg, log_w_max))",
                 "respo_branch(log_w, alpha_neg, beta_neg, lambda_neg, log_w_max),\n                       "
                 "respo_branch(log_w, alpha_pos, beta_pos, lambda_pos, log_w_max))"),
    "mutant_c": ("log_phi0 - lam * torch.expm1(log_phi0)", "log_phi0 - 0 * torch.expm1(log_phi0)"),
    "mutant_d": ("power_mean_log(log_w.clamp(-log_w_max, log_w_max), alpha, beta)", "power_mean_log(log_w, alpha, beta)"),
    "mutant_e": ("r > 1 + eps[1]", "r > 1 + eps[0]"),
}
IS_CORNER = {"beta_pos": 1.0, "lambda_pos": 0.0, "beta_neg": 1.0, "lambda_neg": 0.0}  # phi = w on both branches


def mutant(name: str) -> types.ModuleType:
    """A copy of nano_respo.kernel with one mutation applied; poke at it like the real one."""
    old, new = MUTANTS[name]
    source = inspect.getsource(kernel)
    if source.count(old) != 1:
        raise RuntimeError(f"{name}: its mutation site is not in nano_respo/kernel.py any more; update checks.MUTANTS")
    module = types.ModuleType(f"kernel_{name}")
    sys.modules[module.__name__] = module  # dataclasses look their module up while building LossConfig
    try:
        exec(compile(source.replace(old, new), f"<kernel {name}>", "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    return module


def coefficient_of(k, method: str, w: float, positive: bool, **overrides) -> float:
    """phi read back from the gradient of k.policy_loss on a one-token response."""
    logp = torch.tensor([[math.log(w)]], dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([1.0 if positive else -1.0], dtype=torch.float64)
    cfg = k.LossConfig(method=method, agg="seq-mean-token-sum", **overrides)
    loss, _ = k.policy_loss(logp, torch.zeros_like(logp), adv, torch.ones(1, 1, dtype=torch.bool), cfg)
    (grad,) = torch.autograd.grad(loss, logp)
    return -grad.item() / adv.item()


def loss_at_the_is_corner(k) -> float:
    """The loss at |log w| = 1e4 (a positive up, a negative down) with both branches at plain IS, (beta, lambda) = (1, 0)."""
    logp = torch.tensor([[1e4], [-1e4]], dtype=torch.float64)
    cfg = k.LossConfig(**IS_CORNER)
    loss, _ = k.policy_loss(logp, torch.zeros_like(logp), torch.tensor([1.0, -1.0], dtype=torch.float64),
                            torch.ones(2, 1, dtype=torch.bool), cfg)
    return loss.item()


def on_policy(k) -> bool:
    """At w = 1 (a fresh batch) ReSPO's coefficient is 1 for both signs. Reads: phi_+ at w = 1."""
    return all(abs(coefficient_of(k, "respo", 1.0, s) - 1) < 1e-12 for s in (True, False))


def positive_limit(k) -> bool:
    """A positive with w -> 0 gets the most a positive gets, e/2 (phi_+'s maximum, at w = 0). Reads: phi_+ at w = 1e-30."""
    return abs(coefficient_of(k, "respo", 1e-30, True) - math.e / 2) < 1e-6


def negative_vanishes(k) -> bool:
    """A negative with a huge w gets (almost) no weight. Reads: phi_- at w = 1e6."""
    return coefficient_of(k, "respo", 1e6, False) < 1e-6


def finite_at_extremes(k) -> bool:
    """The loss and its gradient stay finite at |log w| = 1e4, also at the plain-IS corner (beta, lambda) = (1, 0).
    Reads: the loss at the plain-IS corner (loss_at_the_is_corner)."""
    logp = torch.tensor([[1e4], [-1e4]], dtype=torch.float64, requires_grad=True)
    for overrides in ({}, IS_CORNER):
        loss, _ = k.policy_loss(logp, torch.zeros_like(logp), torch.tensor([1.0, -1.0], dtype=torch.float64),
                                torch.ones(2, 1, dtype=torch.bool), k.LossConfig(**overrides))
        (grad,) = torch.autograd.grad(loss, logp)
        if not (loss.isfinite() and grad.isfinite().all()):
            return False
    return True


def dapo_clip_higher(k) -> bool:
    """DAPO clips positives at 1 + 0.28, not 1 + 0.2. Reads: DAPO's phi of a positive token at r = 1.25."""
    return abs(coefficient_of(k, "dapo", 1.25, True) - 1.25) < 1e-9


PROPERTIES = {f.__name__: f for f in (on_policy, positive_limit, negative_vanishes, finite_at_extremes,
                                      dapo_clip_higher)}


def _reading(property_name: str, k) -> float:
    """The number a property reads off a kernel (its docstring's "Reads:"), graded against the reader's."""
    if property_name == "finite_at_extremes":
        return loss_at_the_is_corner(k)
    method, w, positive = {"on_policy": ("respo", 1.0, True), "positive_limit": ("respo", 1e-30, True),
                           "negative_vanishes": ("respo", 1e6, False),
                           "dapo_clip_higher": ("dapo", 1.25, True)}[property_name]
    return coefficient_of(k, method, w, positive)


def same_number(a: float, b: float) -> bool:
    """Equal to 1e-6 relative, with nan equal to nan and an infinity only to itself."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b if math.isinf(a) or math.isinf(b) else math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)


def check_mutant(name: str, property_name: str, value) -> bool:
    """Right when the named property holds for the real kernel, fails for the mutant, and value is what
    that property reads off the mutant."""
    if property_name not in PROPERTIES:
        return verdict(False, f"{name}: {property_name!r} is not one of {', '.join(PROPERTIES)}",
                       "answer with the name of one of the properties listed above.")
    test = PROPERTIES[property_name]
    broken = mutant(name)
    if not (test(kernel) and not test(broken)):
        return verdict(False, f"{name} is caught by {property_name}",
                       f"{property_name} still holds for {name}, so its bug is elsewhere: run each property on "
                       f"mutant('{name}') and read the edit's effect on phi.")
    try:
        value = float(value)
    except (TypeError, ValueError):
        value = None
    return verdict(value is not None and same_number(value, _reading(property_name, broken)),
                   f"{name}: {property_name}, and the value it reads off the mutant",
                   f"the property is right; now compute the number its docstring says it reads, on "
                   f"mutant('{name}') (coefficient_of or loss_at_the_is_corner), not on the real kernel.")



# =========================================================================================
# research/notebooks/starvation_controls' exercises (§11): predict, then run. Graded against the committed records and
# against a step the check takes itself; a wrong answer gets a hint, never the answer.
# =========================================================================================

COLLAPSE_LR, COLLAPSE_REUSE, STUCK_BELOW = 0.03, 16, 0.1
# The toy's selection records ran this project's reconstruction, respo_wtilt (research/study_rows.py), whose
# default kernel is the one compared: its knobs as each record names them.
RECONSTRUCTION_DEFAULT_KERNEL = {"wtilt_alpha_pos": 0.0, "wtilt_lambda_pos": 0.1, "wtilt_alpha_neg": 3.0,
                                 "wtilt_lambda_neg": 2.0}


def collapsed_methods(records_path) -> set:
    """Methods stuck (final training reward < 0.1) on every seed at lr 0.03, R = 16, the reconstruction respo_wtilt at
    its default kernel."""
    import gzip
    import json
    from pathlib import Path

    path = Path(records_path)
    files = [path] if path.is_file() else [p for p in (path / "runs.jsonl.gz", path / "runs.jsonl") if p.exists()]
    runs: dict[str, list[bool]] = {}
    for file in files:
        with (gzip.open(file, "rt") if file.suffix == ".gz" else open(file)) as f:
            for line in filter(str.strip, f):
                r = json.loads(line)
                if (r["lr"], r["reuse"]) != (COLLAPSE_LR, COLLAPSE_REUSE):
                    continue
                if r["method"] == "respo_wtilt" and r.get("loss") != RECONSTRUCTION_DEFAULT_KERNEL:
                    continue
                runs.setdefault(r["method"], []).append(r["final_reward"] < STUCK_BELOW)
    if not runs:
        raise FileNotFoundError(f"{records_path}: no runs at lr {COLLAPSE_LR:g}, R = {COLLAPSE_REUSE}")
    return {method for method, stuck in runs.items() if all(stuck)}


def check_collapse_prediction(prediction, records_path) -> bool:
    """prediction: the set of method names that collapse at lr 0.03 and R = 16 on every selection seed."""
    truth = collapsed_methods(records_path)
    names = set(prediction) if isinstance(prediction, (set, frozenset, list, tuple)) else None
    ok = names is not None and names == truth
    if names is None:
        hint = "answer with a set of method names, e.g. {'grpo'}."
    else:
        hint = ("the coefficients of §3 and §5 alone are no sure guide here, so test the guess: "
                "run seed 0 of each method you are unsure of in the next cell, or read final_reward < 0.1 per "
                "seed in the records (runs.jsonl, lr 0.03, reuse 16).")
    return verdict(ok, "the methods that collapse at lr 0.03, R = 16 on every selection seed", hint)


def check_starved_prediction(prediction, log_w_after_one_step: torch.Tensor, positive: torch.Tensor) -> bool:
    """prediction: how many positives sit below w = 0.8 after the step; right within max(2, 15%) of the count."""
    truth = int((positive & (log_w_after_one_step < math.log(0.8))).sum())
    numeric = isinstance(prediction, (int, float)) and not isinstance(prediction, bool) and math.isfinite(prediction)
    ok = numeric and abs(prediction - truth) <= max(2, round(0.15 * truth))
    hint = ("answer with a number." if not numeric else
            "Adam's first step moves every weight by about lr whatever the gradient's size (§2), and the starved "
            "count came from that step's length: how does the length scale with lr, and how far below log 0.8 "
            "did §2's starved positives sit after one step at lr 0.01?")
    return verdict(ok, "the number of positives below w = 0.8 after one clip step at the smaller lr", hint)


# =========================================================================================
# research/notebooks/tiny_qwen3_records' exercises (§5): read the rollout batch. Graded against the batch itself and
# against kernel.coefficients; a wrong answer gets a hint, never the answer.
# =========================================================================================

def check_high_w_negative(row, log_w: torch.Tensor, advantages: torch.Tensor) -> bool:
    """row: the index of a negative (A < 0) whose w is the largest among the negatives (copies tie)."""
    negative = advantages < 0
    is_index = isinstance(row, int) and not isinstance(row, bool) and 0 <= row < len(log_w)
    if not is_index:
        hint = f"answer with a row index, a whole number from 0 to {len(log_w) - 1}."
    elif not negative[row]:
        hint = "that row's advantage is not negative: a wrong answer is a row with A < 0."
    else:
        hint = ("that row is a wrong answer, but another wrong answer has a larger w: compare log w over "
                "the rows with A < 0 only (torch.where or a boolean mask, then argmax).")
    ok = is_index and bool(negative[row]) and bool(log_w[row] >= log_w[negative].max() - 1e-9)
    return verdict(ok, "the wrong answer with the largest w in the batch", hint)


def coefficient_rows(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor, advantages: torch.Tensor):
    """The responses the coefficient check grades on: the batch's lowest- and highest-w positive and negative,
    and copies of each shifted to sequence weights on both sides of the clip band (logp, old_logp, mask, adv)."""
    log_w = kernel.sequence_log_weight(logp, old_logp, mask)                     # [N]
    picks = []
    for sign in (advantages > 0, advantages < 0):
        if sign.any():
            masked = torch.where(sign, log_w, torch.full_like(log_w, math.nan))
            picks += [int(masked.nan_to_num(math.inf).argmin()), int(masked.nan_to_num(-math.inf).argmax())]
    rows = [(logp[i], old_logp[i], mask[i], advantages[i]) for i in picks]
    for i in picks:
        length = int(mask[i].sum())
        for target in (0.5, 0.9, 1.1, 1.5):                                       # w of the shifted copy
            shift = (math.log(target) - log_w[i].item()) / length                 # the same change on every token
            rows.append((logp[i] + shift * mask[i], old_logp[i], mask[i], advantages[i]))
    return rows


def check_coefficient_by_hand(coefficient, logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor,
                              advantages: torch.Tensor) -> bool:
    """coefficient(logp [C], old_logp [C], mask [C], advantage, method) must equal kernel.coefficients' phi."""
    ok = True
    for method in ("seq_clip", "respo"):
        for lp, old, m, a in coefficient_rows(logp, old_logp, mask, advantages):
            phi, _ = kernel.coefficients(lp[None], old[None], a[None], m[None], LossConfig(method=method))
            answer = attempt(coefficient, lp.clone(), old.clone(), m.clone(), a.item(), method)
            try:
                ok &= math.isclose(float(answer), phi[0, 0].item(), rel_tol=1e-4, abs_tol=1e-9)  # float32 sums
            except (TypeError, ValueError):
                ok = False
            if not ok:
                break
        if not ok:
            break
    return verdict(ok, "the sequence clip's and ReSPO's coefficient of one response, by hand",
                   "log w is a sum of token log-ratios over the response's own tokens only (the mask); the sign "
                   "of the advantage picks the branch; the clip table (core notebook 02_every_method_is_a_coefficient §1) says where the sequence "
                   "clip keeps w and where it gives 0, and LossConfig() holds ReSPO's (alpha, beta, lambda) of each "
                   "sign (docs/math.md §3).")

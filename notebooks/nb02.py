"""Cells of 02_two_branches.ipynb (built by notebooks/build.py)."""

NAME = "02_two_branches.ipynb"

CELLS = [
("md", r"""# 02 · The two branches

What each method gives a response as a function of its weight $w$, for both advantage
signs; the bound of ReSPO's negative branch; how the second moment of the gradient
estimator behaves against plain importance sampling as drift grows; and the contrast
between token-level and sequence-level clipping. All coefficients come from
`nano_respo.kernel` (`phi_curve` reads them back from the gradient of `policy_loss`)."""),
("code", """from nano_respo.kernel import (METHOD_TABLE, LossConfig, policy_loss, power_tilt,
                               respo_coefficient, sequence_log_weight)
from nano_respo.report import phi_curve"""),
("md", r"""## 1. $\phi(w)$ for every method and both signs

Sequence-level methods see the product weight $w=\prod_t r_t$; token-level methods
(GRPO, DAPO, CISPO, SAPO, dual-clip) apply their coefficient to each token's ratio $r_t$, so
for them the horizontal axis is $r_t$ (the same number for a one-token response)."""),
("code", """log_w = torch.linspace(math.log(1e-3), math.log(1e2), 400)
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
for ax, positive in zip(axes, (True, False)):
    for method, (level, *_rest) in METHOD_TABLE.items():
        phi = phi_curve(method, log_w, positive)
        ax.plot(log_w.exp(), phi, lw=2.4 if method == "respo" else 1.0,
                ls="-" if level == "sequence" else "--", label=f"{method} ({level})")
    ax.set_xscale("log"); ax.set_ylim(-0.05, 2.5); ax.grid(alpha=0.3)
    ax.set_xlabel("w  (r_t for token-level methods)")
    ax.set_title("A > 0" if positive else "A < 0")
axes[0].set_ylabel("phi"); axes[1].legend(fontsize=6, ncol=2)
plt.tight_layout(); plt.show()"""),
("md", r"""Left: clipping (solid seq_clip, dashed grpo/dapo) gives an under-generated positive only
$w$, vanishing as $w\to0$; VESPO ($w^2e^{-3(w-1)}$) starves it quadratically; ReSPO's positive
branch stays near 1 down to $w\to0$, with floor $e^{\lambda_+}$. Right: plain IS and clipping
let an over-generated negative keep $w$; ReSPO's negative branch rises to a bounded maximum
and then decays to 0.

## 2. The positive branch: $\phi_+(w)>w$ below 1, a nonzero floor

For $0\le\alpha_+<1$ and $w<1$: $\phi_+(w)/w=w^{\alpha_+-1}e^{-\lambda_+(w-1)}>1$, and $\to\infty$ as $w\to0$."""),
("code", """cfg = LossConfig()
w = torch.logspace(-8, 0, 9, dtype=torch.float64)[:-1]
phi_pos = power_tilt(w.log(), cfg.alpha_pos, cfg.lambda_pos)
print("phi_+(w) / w :", (phi_pos / w).tolist())
print("phi_+(1e-8) =", phi_pos[0].item(), "  floor e^lambda_+ =", math.exp(cfg.lambda_pos))
assert (phi_pos > w).all()"""),
("md", r"""## 3. The bound of the negative branch

$\frac{d}{dw}\big[\alpha\log w-\lambda(w-1)\big]=\alpha/w-\lambda=0$ gives the maximiser
$w^*=\alpha_-/\lambda_-$ and
$$\max_w\phi_-(w)=\Big(\frac{\alpha_-}{\lambda_-}\Big)^{\alpha_-}e^{\lambda_--\alpha_-}.$$
Compare with a dense grid evaluated by the kernel, for a few settings:"""),
("code", """grid = torch.linspace(-12, 6, 200001, dtype=torch.float64)
for a, lam in ((3.0, 2.0), (2.0, 2.0), (3.0, 1.0), (1.0, 0.5)):
    phi = respo_coefficient(grid, torch.zeros_like(grid, dtype=torch.bool), alpha_neg=a, lambda_neg=lam)
    closed = (a / lam) ** a * math.exp(lam - a)
    print(f"alpha_-={a}, lambda_-={lam}: grid max {phi.max():.6f} at w={grid[phi.argmax()].exp():.4f};"
          f"  closed form {closed:.6f} at w*={a / lam:.4f};  phi_-(0.5)={phi[(grid - math.log(0.5)).abs().argmin()]:.3f}")"""),
("md", r"""The last column is about the spec's warning on $\alpha_-=\lambda_-$: a negative already pushed
down to $w=0.5$ still gets $0.68$ of its weight at $(2,2)$ (a clip gives it 0), against $0.34$
at $(3,2)$; the less a branch falls below $w=1$, the less it stops pushing a negative that is
already down. (The spec quotes $0.82$; that is the value at $(1,1)$, $0.5\,e^{0.5}$.)

## 4. Variance against plain IS as drift grows

Take responses of $L=16$ tokens drawn independently from $\mu_t$ (5 choices per token) and a
current policy $\pi_t$ that drifts from it by a logit perturbation of size $\delta$. The
importance-sampling estimator's second moment $\mathbb E_\mu[w^2]=\prod_t\mathbb E_{\mu_t}[r_t^2]$
grows exponentially in $L$; with $\lambda>0$ the coefficient is bounded, so
$\mathbb E_\mu[\phi(w)^2]$ stays finite. Monte Carlo with 200 000 responses per drift (the IS
column is also given exactly):"""),
("code", """torch.manual_seed(0)
L, K, N = 16, 5, 200_000
mu_logits = torch.randn(L, K)
direction = torch.randn(L, K)
rows = []
for delta in (0.0, 0.1, 0.2, 0.4, 0.6, 0.8):
    log_mu = torch.log_softmax(mu_logits, -1)                       # [L, K]
    log_pi = torch.log_softmax(mu_logits + delta * direction, -1)  # [L, K]
    y = torch.multinomial(log_mu.exp(), N, replacement=True).T      # [N, L] responses drawn from mu
    old_logp = log_mu.gather(1, y.T).T                              # [N, L]
    logp = log_pi.gather(1, y.T).T                                  # [N, L]
    s = sequence_log_weight(logp, old_logp, torch.ones_like(y, dtype=torch.bool))   # [N]
    exact_is = ((2 * log_pi - log_mu).exp().sum(-1)).prod().item()   # prod_t E_mu[r_t^2]
    second = lambda phi: (phi.double() ** 2).mean().item()
    rows.append((delta, exact_is, second(s.exp()),
                 second(power_tilt(s, cfg.alpha_pos, cfg.lambda_pos)),
                 second(power_tilt(s, cfg.alpha_neg, cfg.lambda_neg))))
print(f"{'delta':>6} {'E[w^2] exact':>13} {'E[w^2] MC':>10} {'E[phi_+^2]':>11} {'E[phi_-^2]':>11}")
for r in rows:
    print(f"{r[0]:>6} {r[1]:>13.3f} {r[2]:>10.3f} {r[3]:>11.3f} {r[4]:>11.3f}")
fig, ax = plt.subplots(figsize=(5, 3))
d = [r[0] for r in rows]
ax.semilogy(d, [r[1] for r in rows], "k-o", label="plain IS, exact")
ax.semilogy(d, [r[3] for r in rows], "-o", label="ReSPO positive branch")
ax.semilogy(d, [r[4] for r in rows], "-o", label="ReSPO negative branch")
ax.set_xlabel("drift delta (per-token logit perturbation)"); ax.set_ylabel("second moment")
ax.grid(alpha=0.3); ax.legend(fontsize=7); plt.tight_layout(); plt.show()"""),
("md", r"""Plain IS's second moment (exact column) grows fast with drift, and its Monte Carlo estimate
falls short of it at large drift: the mass sits in rare huge weights that 200 000 samples
rarely see, which is exactly why IS is unusable there. Both ReSPO branches stay of order 1.
(Bounded is not the same as unbiased: the kernel trades the IS correction for this
control.)

## 5. Token-level versus sequence-level clipping

The spec's claim to check: per-token ratios stay near 1 while their product drifts far from
it, so a token-level clip (GRPO) starves an under-generated positive far less than a
sequence-level clip. Build a batch of positive responses of 16 tokens with independent
per-token log-ratios $d_t\sim\mathcal N(-0.05, 0.1^2)$ (small drift per token) and ask the kernel
what each method gives the positives whose **sequence** weight is below $1-\epsilon=0.8$."""),
("code", """torch.manual_seed(0)
B, T = 4000, 16
old_logp = torch.full((B, T), -1.0)
logp = old_logp + (-0.05 + 0.1 * torch.randn(B, T))
mask = torch.ones(B, T, dtype=torch.bool)
adv = torch.ones(B)
w = sequence_log_weight(logp, old_logp, mask).exp()
r = (logp - old_logp).exp()
print(f"token ratios outside [0.8, 1.2]: {((r < 0.8) | (r > 1.2)).float().mean():.3f}")
print(f"sequences with w < 0.8:          {(w < 0.8).float().mean():.3f}")
for method in ("grpo", "seq_clip", "cispo", "vespo", "respo"):
    _, stats = policy_loss(logp, old_logp, adv, mask, LossConfig(method=method))
    print(f"{method:>8}: low-w positives are {stats['low_w_pos_frac']:.3f} of positives and get "
          f"{stats['low_w_pos_phi_mass']:.3f} of the phi mass")"""),
("md", r"""To see *how much* weight each low-$w$ positive keeps, look at the mean coefficient per
response (the token-level methods' coefficient is averaged over the response's tokens):"""),
("code", """from nano_respo.kernel import coefficients
low = w < 0.8
for method in ("grpo", "seq_clip", "cispo", "vespo", "respo"):
    phi, _ = coefficients(logp, old_logp, adv, mask, LossConfig(method=method))   # [B, T]
    print(f"{method:>8}: mean phi of a low-w positive = {phi[low].mean():.3f};"
          f"  of the others = {phi[~low].mean():.3f}")"""),
("md", r"""In this synthetic batch the token-level clip leaves low-$w$ positives most of their weight
(each token keeps its own ratio $r_t\approx1$; only the few tokens above $1.2$ are zeroed),
while the sequence-level clip gives them their product weight $w<0.8$. ReSPO's positive
branch gives them slightly more than 1. That is all this cell shows: the drift here is
i.i.d. per token, whereas a trained policy's drift is correlated across tokens, which moves
the token-level numbers (the spec's prototype measured about 0.85 for GRPO against 0.2–0.4
for a sequence clip). Notebook 03 measures it on a trained policy."""),
]

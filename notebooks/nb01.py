"""Cells of 01_alpha_divergence_objective.ipynb (built by notebooks/build.py)."""

NAME = "01_alpha_divergence_objective.ipynb"

CELLS = [
("md", r"""# 01 · From the clip table to the α-divergence objective

This notebook walks from the coefficient table of a clipped surrogate to the ReSPO kernel,
checking every equation numerically with the functions of `nano_respo.kernel` (nothing here
re-implements the loss). The derivation is the one fixed in the project's spec
(reconstructed from the ReSPO abstract; the paper's full text was not available).

Notation: a prompt $x$, a response $y\sim\mu$ (the behaviour policy that sampled it), the
current policy $\pi_\theta$, the sequence weight $w=\pi_\theta(y|x)/\mu(y|x)$ and an advantage $A$.
Every method is a **coefficient** $\phi$ on the policy gradient:
$$\nabla J = \mathbb E_\mu\big[\phi\,A\,\nabla\log\pi_\theta(y|x)\big].$$"""),
("code", """from nano_respo.kernel import (LossConfig, policy_loss, power_tilt, respo_coefficient,
                               respo_surrogate, sequence_log_weight)
from nano_respo.report import phi_curve   # phi read back from the gradient of kernel.policy_loss"""),
("md", r"""## 1. The clipped surrogate as a coefficient table

Sequence-level PPO clip, $\min(wA,\ \mathrm{clip}(w,1-\epsilon,1+\epsilon)A)$, has gradient
coefficient

| sign | $w<1-\epsilon$ | inside | $w>1+\epsilon$ |
|---|---|---|---|
| $A>0$ | $w$ (starved as $w\to0$) | $w$ | $0$ |
| $A<0$ | $0$ | $w$ | $w$ (unbounded) |

`phi_curve` differentiates `policy_loss(method="seq_clip")` and reads $\phi$ back:"""),
("code", """w = torch.tensor([0.05, 0.5, 1.0, 1.1, 1.5, 10.0])
print("w        ", w.tolist())
print("phi, A>0 ", phi_curve("seq_clip", w.log(), True).float().tolist())
print("phi, A<0 ", phi_curve("seq_clip", w.log(), False).float().tolist())"""),
("md", r"""Two things are visible: a positive the current policy under-generates ($w=0.05$) gets
the weight $0.05$, and a negative it over-generates ($w=10$) gets $10$. That is the
sign-dependent gradient starvation of the abstract.

## 2. The power surrogate

Replace the clip by a power. With $\lambda=0$,
$$J_\alpha(\theta)=\mathbb E_\mu\Big[A\,\frac{w^\alpha-1}{\alpha}\Big]\quad(\log w\text{ at }\alpha=0),
\qquad \nabla J_\alpha=\mathbb E_\mu\big[A\,w^\alpha\,\nabla\log\pi_\theta\big],$$
since $\nabla w^\alpha=\alpha w^\alpha\nabla\log\pi_\theta$. Check it exactly on a categorical
"response space" of 6 outcomes: `respo_surrogate(log w, α, 0)` is $(w^\alpha-1)/\alpha$ and
`power_tilt(log w, α, 0)` is $w^\alpha$."""),
("code", """torch.manual_seed(0)
mu = torch.softmax(torch.randn(6, dtype=torch.float64), 0)          # behaviour policy
theta = torch.randn(6, dtype=torch.float64, requires_grad=True)     # current policy's logits
A = torch.randn(6, dtype=torch.float64)                             # an advantage per outcome
for alpha in (0.0, 0.5, 2.0):
    log_pi = torch.log_softmax(theta, 0)
    log_w = log_pi - mu.log()
    J = (mu * A * respo_surrogate(log_w, alpha, 0.0)).sum()
    (grad_autograd,) = torch.autograd.grad(J, theta)
    # E_mu[A w^alpha grad log pi], with grad log pi of outcome y = e_y - pi
    jac = torch.eye(6, dtype=torch.float64) - log_pi.exp().detach()
    grad_formula = (mu * A * power_tilt(log_w.detach(), alpha, 0.0)) @ jac
    print(f"alpha={alpha}: max |autograd - formula| = {(grad_autograd - grad_formula).abs().max():.2e}")"""),
("md", r"""## 3. The α-divergence identity

The core of $J_\alpha$ is $\mathbb E_\mu[w^\alpha]=\sum_y\pi^\alpha\mu^{1-\alpha}$, which is
Amari's α-divergence in disguise:
$$\mathbb E_\mu[w^\alpha]=1-\alpha(1-\alpha)\,D_\alpha(\pi\,\|\,\mu).$$
$D_\alpha$ interpolates the two KL directions: $D_\alpha\to\mathrm{KL}(\mu\|\pi)$ as $\alpha\to0$ and
$\to\mathrm{KL}(\pi\|\mu)$ as $\alpha\to1$. So $\alpha$ chooses how the surrogate trades the
mass-covering and the mode-seeking direction; $\alpha=1$ is plain importance sampling."""),
("code", """pi = torch.softmax(theta.detach(), 0)
log_w = pi.log() - mu.log()
def d_alpha(alpha):
    return (1 - (mu * power_tilt(log_w, alpha, 0.0)).sum()) / (alpha * (1 - alpha))
kl_mu_pi = (mu * (mu / pi).log()).sum()
kl_pi_mu = (pi * (pi / mu).log()).sum()
for alpha in (1e-4, 0.25, 0.5, 0.75, 1 - 1e-4):
    print(f"alpha={alpha:<7} D_alpha={d_alpha(alpha):.5f}")
print(f"KL(mu||pi)={kl_mu_pi:.5f}   KL(pi||mu)={kl_pi_mu:.5f}")"""),
("md", r"""## 4. The variational proposal and the exponential tilt

Which distribution $Q$ should the gradient be averaged under? Ask for one that stays close to
both $\mu$ (where the data is) and $\pi$ (where we are going), with a budget on the weight:
$$Q^*=\arg\min_Q\ (1-\alpha)\,\mathrm{KL}(Q\|\mu)+\alpha\,\mathrm{KL}(Q\|\pi)+\lambda\,\mathbb E_Q[w].$$
Setting the derivative of the Lagrangian to zero gives
$$Q^*\ \propto\ \mu^{1-\alpha}\pi^{\alpha}e^{-\lambda w}\quad\Longrightarrow\quad
\frac{Q^*}{\mu}\ \propto\ w^\alpha e^{-\lambda w}\ \propto\ \phi(w)=w^\alpha e^{-\lambda(w-1)},$$
so $\mathbb E_{Q^*}[A\nabla\log\pi]\propto\mathbb E_\mu[\phi(w)A\nabla\log\pi]$. The tilt $\lambda$ is the
multiplier of the budget $\mathbb E_Q[w]\le C$; since $\mathrm{Var}_\mu(w)=\mathbb E_\pi[w]-1$, it is a
variance control. Check: minimise the objective numerically over $Q$ and compare with the
closed form built from `power_tilt`."""),
("code", """def objective(q, alpha, lam):
    w = (log_w).exp()
    return ((1 - alpha) * (q * (q / mu).log()).sum() + alpha * (q * (q / pi).log()).sum()
            + lam * (q * w).sum())

for alpha, lam in ((0.0, 0.1), (0.5, 1.0), (3.0, 2.0)):
    logits = torch.zeros(6, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([logits], max_iter=200, tolerance_grad=1e-12, tolerance_change=1e-14)
    def closure():
        opt.zero_grad()
        loss = objective(torch.softmax(logits, 0), alpha, lam)
        loss.backward()
        return loss
    opt.step(closure)
    q_numeric = torch.softmax(logits.detach(), 0)
    q_closed = mu * power_tilt(log_w, alpha, lam)
    q_closed = q_closed / q_closed.sum()
    print(f"alpha={alpha}, lambda={lam}: max |Q_numeric - Q*| = {(q_numeric - q_closed).abs().max():.1e}")"""),
("md", r"""(With $\alpha>1$ the weights on $\mathrm{KL}$ are no longer a convex combination; the closed
form still is the stationary point, and the optimiser still finds it here.)

## 5. The surrogate $\Phi$ whose gradient is the kernel

ReSPO's loss is `-stopgrad(phi) * A * log pi`. It is the gradient of a real objective:
$$J=\operatorname{mean}_i A_i\,\Phi(w_i),\qquad \Phi(w)=\int_1^w u^{\alpha-1}e^{-\lambda(u-1)}\,du,$$
because $\frac{d}{d\theta}\Phi(w)=\Phi'(w)\,w\,\nabla\log\pi=\phi(w)\nabla\log\pi$. Closed forms:
$(w^\alpha-1)/\alpha$ at $\lambda=0$; $e^{\lambda}\lambda^{-\alpha}\Gamma(\alpha)\,[P(\alpha,\lambda w)-P(\alpha,\lambda)]$ for
$\alpha,\lambda>0$; an exponential-integral form at $\alpha=0$. First $\Phi'(w)\,w=\phi(w)$ by finite
differences, on all three branches:"""),
("code", """log_w_grid = torch.linspace(-4, 2.5, 9, dtype=torch.float64)
h = 1e-6
for alpha, lam in ((0.0, 0.1), (0.5, 0.0), (3.0, 2.0), (0.0, 0.0)):
    slope = (respo_surrogate(log_w_grid + h, alpha, lam) - respo_surrogate(log_w_grid - h, alpha, lam)) / (2 * h)
    err = (slope - power_tilt(log_w_grid, alpha, lam)).abs().max()   # d Phi / d log w = w Phi'(w) = phi(w)
    print(f"alpha={alpha}, lambda={lam}: max |dPhi/dlog w - phi| = {err:.1e}")"""),
("md", r"""And the whole loss: on a batch of multi-token responses with both advantage signs, the
gradient of `policy_loss` (sequence-sum aggregation) equals the gradient of
$-\operatorname{mean}_i A_i\Phi_{\mathrm{sign}(A_i)}(w_i)$."""),
("code", """torch.manual_seed(1)
B, T = 8, 5
old_logp = -torch.rand(B, T, dtype=torch.float64) * 2
logp = (old_logp + 0.4 * torch.randn(B, T, dtype=torch.float64)).requires_grad_(True)
mask = torch.rand(B, T) > 0.2
adv = torch.randn(B, dtype=torch.float64)
cfg = LossConfig(method="respo", agg="seq-mean-token-sum")
loss, stats = policy_loss(logp, old_logp, adv, mask, cfg)
(g_loss,) = torch.autograd.grad(loss, logp)

s = torch.where(mask, logp - old_logp, torch.zeros_like(logp)).sum(-1)    # log w, with grad
Phi = torch.where(adv > 0, respo_surrogate(s, cfg.alpha_pos, cfg.lambda_pos),
                  respo_surrogate(s, cfg.alpha_neg, cfg.lambda_neg))
(g_surrogate,) = torch.autograd.grad(-(adv * Phi).sum() / mask.any(-1).sum(), logp)
print("max |grad policy_loss - grad surrogate| =", f"{(g_loss - g_surrogate).abs().max():.1e}")"""),
("md", r"""## 6. Two branches

The same derivation with one $(\alpha,\lambda)$ per advantage sign gives ReSPO:
$$\phi_s(w)=w^{\alpha_s}e^{-\lambda_s(w-1)},\qquad s\in\{+,-\}.$$
$\phi_s(1)=1$, so on-policy every method agrees. The positive branch ($\alpha_+=0$, small
$\lambda_+$) is almost flat and keeps a floor $e^{\lambda_+}$ as $w\to0$; the negative branch
($\lambda_->0$) decays to 0 as $w\to\infty$. Notebook 02 looks at both."""),
("code", """w = torch.tensor([1e-3, 0.1, 0.5, 1.0, 2.0, 10.0], dtype=torch.float64)
cfg = LossConfig()
print("defaults:", {k: getattr(cfg, k) for k in ("alpha_pos", "lambda_pos", "alpha_neg", "lambda_neg")})
print("w      ", w.tolist())
print("phi_+  ", respo_coefficient(w.log(), torch.ones(6, dtype=torch.bool)).tolist())
print("phi_-  ", respo_coefficient(w.log(), torch.zeros(6, dtype=torch.bool)).tolist())
print("floor e^lambda_+ =", math.exp(cfg.lambda_pos))"""),
]

"""What the course notebooks share: a one-line check, an enumerable sequence space, the α-divergence, a
branch's slope by autograd, and core 04's warm policies.

Nothing here is loss math: every coefficient the notebooks use comes from
nano_respo.kernel. This module holds the toy *policy* the derivations are checked on
(a tabular autoregressive policy small enough to sum over every sequence exactly) and
the line that prints each check.
"""

from __future__ import annotations

import itertools
import math

import torch

from nano_respo.kernel import LossConfig, coefficients, group_advantages, policy_loss, respo_branch


def confirm(claim: str, error: float, tol: float) -> None:
    """Print one line: the claim and whether the numbers agree within tol; raise if they do not."""
    error = float(error)
    if not error <= tol:
        raise AssertionError(f"{claim}: error {error:.3g} exceeds {tol:.0e}")
    print(f"✓ {claim}  (error < {tol:.0e})")


def divergence(p, m, gamma):
    """Amari's alpha-divergence D_gamma(p || m) between positive measures (the KL limits at gamma = 1 and 0)."""
    if gamma == 1.0:
        return (p * (p.log() - m.log()) - p + m).sum()
    if gamma == 0.0:
        return (m * (m.log() - p.log()) - m + p).sum()
    return ((p ** gamma * m ** (1 - gamma) - gamma * p - (1 - gamma) * m) / (gamma * (gamma - 1))).sum()


def branch_slope(log_w: float, alpha: float, beta: float, lam: float) -> float:
    """d phi / d W at W = exp(log_w), by autograd through the kernel's respo_branch."""
    s = torch.tensor([log_w], dtype=torch.float64, requires_grad=True)
    (d_log,) = torch.autograd.grad(respo_branch(s, alpha, beta, lam).sum(), s)
    return d_log.item() / math.exp(log_w)


class SequenceSpace:
    """Every sequence of `length` tokens over `vocab` symbols, and a tabular autoregressive policy.

    The policy is one flat parameter vector theta: for each position t a table of logits
    [vocab**t, vocab], one row per prefix y_<t. Small enough to enumerate (vocab**length
    sequences), so expectations are exact sums: E_mu[f] = sum_y mu(y) f(y).
    """

    def __init__(self, vocab: int, length: int):
        self.vocab, self.length = vocab, length
        self.seqs = torch.tensor(list(itertools.product(range(vocab), repeat=length)))  # [N, L]
        self.sizes = [vocab ** t * vocab for t in range(length)]
        self.n_params = sum(self.sizes)
        powers = vocab ** torch.arange(length)  # [L]
        # prefix_id[n, t]: the row of table t that sequence n reads (its first t tokens in base vocab)
        self.prefix_id = torch.stack(
            [(self.seqs[:, :t] * powers[:t].flip(0)).sum(-1) for t in range(length)], -1)  # [N, L]

    def random_theta(self, generator: torch.Generator, scale: float = 1.0) -> torch.Tensor:
        return scale * torch.randn(self.n_params, generator=generator, dtype=torch.float64)

    def token_log_probs(self, theta: torch.Tensor) -> torch.Tensor:
        """[N, L] log pi(y_t | y_<t) of every sequence; differentiable in theta."""
        cols = []
        for t, table in enumerate(theta.split(self.sizes)):
            logp = torch.log_softmax(table.view(-1, self.vocab), -1)  # [V**t, V]
            cols.append(logp[self.prefix_id[:, t], self.seqs[:, t]])  # [N]
        return torch.stack(cols, -1)  # [N, L]

    def log_probs(self, theta: torch.Tensor) -> torch.Tensor:
        """[N] log pi(y) = sum_t log pi(y_t | y_<t)."""
        return self.token_log_probs(theta).sum(-1)

    def token_jacobian(self, theta: torch.Tensor) -> torch.Tensor:
        """[N, L, P] d log pi(y_t | y_<t) / d theta for every sequence and position (autograd)."""
        return torch.autograd.functional.jacobian(self.token_log_probs, theta, vectorize=True)


class EndedSpace:
    """Every response of 0 to max_len - 1 content tokens over `vocab` symbols, then an end token.

    A tabular autoregressive policy over vocab + 1 choices (the last one ends the response) at
    every prefix of content tokens; after max_len - 1 content tokens the end is forced. Responses
    have different lengths, so expectations over them are exact sums over all of them: the space
    notebooks/deeper/branches_explored.py §6 plants a long correct response in.
    """

    def __init__(self, vocab: int, max_len: int):
        self.vocab, self.max_len, self.end = vocab, max_len, vocab
        self.seqs = [c + (vocab,) for k in range(max_len) for c in itertools.product(range(vocab), repeat=k)]
        self.rows = {p: i for i, p in enumerate(c for k in range(max_len) for c in itertools.product(range(vocab), repeat=k))}
        n = len(self.seqs)
        self.prefix_row = torch.zeros(n, max_len, dtype=torch.long)   # [N, L] the table row each token reads
        self.tokens = torch.zeros(n, max_len, dtype=torch.long)       # [N, L] the token chosen there
        self.mask = torch.zeros(n, max_len, dtype=torch.bool)         # [N, L] 1 on the response's tokens
        for i, s in enumerate(self.seqs):
            for t, token in enumerate(s):
                self.prefix_row[i, t], self.tokens[i, t], self.mask[i, t] = self.rows[s[:t]], token, True
        self.forced = self.mask & (torch.arange(max_len) == max_len - 1)  # the end after max_len - 1 tokens
        self.n_params = len(self.rows) * (vocab + 1)

    def index(self, response: tuple) -> int:
        return self.seqs.index(tuple(response))

    def logits_from_probs(self, probs: dict) -> torch.Tensor:
        """theta with the given next-token probabilities at the listed prefixes, uniform elsewhere."""
        theta = torch.zeros(len(self.rows), self.vocab + 1, dtype=torch.float64)
        for prefix, p in probs.items():
            theta[self.rows[tuple(prefix)]] = torch.tensor(p, dtype=torch.float64).log()
        return theta.reshape(-1)

    def token_log_probs(self, theta: torch.Tensor) -> torch.Tensor:
        """[N, L] log pi(y_t | y_<t), 0 on padding and on the forced end; differentiable in theta."""
        logp = torch.log_softmax(theta.view(len(self.rows), self.vocab + 1), -1)[self.prefix_row, self.tokens]
        return torch.where(self.mask & ~self.forced, logp, torch.zeros_like(logp))


def reuse_one_group(space: SequenceSpace, reward: torch.Tensor, theta_sampler: torch.Tensor,
                    theta_learner: torch.Tensor, picks: torch.Tensor, steps: int, lr: float = 0.05,
                    cfg: LossConfig = LossConfig(agg="seq-mean-token-sum")):
    """`steps` Adam steps of cfg's loss on one group `picks` [G] of `space` sampled by theta_sampler.

    Returns (log w of every response before each step [R, G], the advantages A [G], the learner's
    parameters at the last step [P]). The group is the whole mini-batch at every step.
    """
    token_logp_mu = space.token_log_probs(theta_sampler)[picks].detach()  # [G, L] the sampler's log-probs
    adv = reward[picks] - reward[picks].mean()  # [G] group-centred
    theta = theta_learner.clone().requires_grad_(True)
    opt = torch.optim.Adam([theta], lr=lr)
    trace = []
    for _ in range(steps):
        at_last_step = theta.detach().clone()
        logp = space.token_log_probs(theta)[picks]  # [G, L]
        trace.append((logp - token_logp_mu).sum(-1).detach())  # log w at this step
        loss, _ = policy_loss(logp, token_logp_mu, adv, torch.ones_like(logp, dtype=torch.bool), cfg)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return torch.stack(trace), adv, at_last_step  # [R, G], [G], [P]


class DriftStudy:
    """Every response of `length` binary tokens, a behaviour policy mu and current policies moved from it.

    A tabular autoregressive mu (seed `seed`), reward 1 when at least `length` // 2 + 1 tokens are 1,
    A = r - E_mu[r], and for each drift delta the policy whose logits moved by delta * N(0, 1) (one
    direction for every delta). Expectations are exact sums over the 2**length responses, so a method's
    bias and spread against the true off-policy gradient have no sampling noise.
    """

    DRIFTS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0)

    def __init__(self, seed: int = 0, length: int = 8, drifts: tuple = DRIFTS):
        self.space, self.drifts = SequenceSpace(vocab=2, length=length), drifts
        gen = torch.Generator().manual_seed(seed)
        theta_mu, direction = self.space.random_theta(gen), self.space.random_theta(gen)
        self.old_logp = self.space.token_log_probs(theta_mu)  # [N, L] log mu of each token
        self.mu = self.old_logp.sum(-1).exp()  # [N]
        self.reward = (self.space.seqs.sum(-1) > length // 2).double()
        self.adv = self.reward - (self.mu * self.reward).sum()  # [N]
        self.mask = torch.ones_like(self.old_logp, dtype=torch.bool)
        self.states = []  # per drift: (logp [N, L], jacobian [N, L, P])
        for d in drifts:
            theta = theta_mu + d * direction
            self.states.append((self.space.token_log_probs(theta), self.space.token_jacobian(theta)))
        self.spread = [self.log_w_std(k) for k in range(len(drifts))]  # the drift as a reader pictures it

    def log_w_std(self, k: int) -> float:
        """The std under mu of the log-weight log w at drift index k."""
        s = (self.states[k][0] - self.old_logp).sum(-1)
        return ((self.mu * s ** 2).sum() - (self.mu * s).sum() ** 2).sqrt().item()

    def bias_and_std(self, cfg: LossConfig, k: int) -> tuple[float, float]:
        """Relative bias |E g_hat - g*| / |g*| and relative std sqrt(Var g_hat) / |g*| of a one-response estimate
        g_hat(y) = sum_t phi_t A grad log pi(y_t | y_<t), at drift index k."""
        logp, jac = self.states[k]
        phi_t, log_w = coefficients(logp, self.old_logp, self.adv, self.mask, cfg)  # [N, L], [N]
        g_hat = ((phi_t * self.adv[:, None])[..., None] * jac).sum(1)  # [N, P] one estimate per response
        g_true = (self.mu * log_w.exp() * self.adv) @ jac.sum(1)  # [P]
        mean = self.mu @ g_hat  # [P]
        var = (self.mu * ((g_hat - mean) ** 2).sum(-1)).sum()
        norm = g_true.norm()
        return ((mean - g_true).norm() / norm).item(), (var.sqrt() / norm).item()

    def bias_by_sign(self, cfg: LossConfig, k: int) -> list[float]:
        """|E_mu[(phi - w) A grad log pi]| over the positives and over the negatives, relative to |g*|."""
        logp, jac = self.states[k]
        phi_t, log_w = coefficients(logp, self.old_logp, self.adv, self.mask, cfg)
        g_true = (self.mu * log_w.exp() * self.adv) @ jac.sum(1)
        gap = ((phi_t - log_w.exp()[:, None]) * self.adv[:, None])[..., None] * jac  # [N, L, P]
        return [((self.mu * rows)[:, None, None] * gap).sum((0, 1)).norm().item() / g_true.norm().item()
                for rows in (self.adv > 0, self.adv < 0)]

    def low_w_keep(self, cfg: LossConfig, k: int, eps: float = 0.2) -> float:
        """Mean coefficient of a positive with w < 1 - eps, under mu: what it keeps of its on-policy weight 1."""
        logp, _ = self.states[k]
        phi_t, log_w = coefficients(logp, self.old_logp, self.adv, self.mask, cfg)
        low = (self.adv > 0) & (log_w < math.log(1 - eps))
        return ((self.mu * phi_t.mean(-1))[low].sum() / self.mu[low].sum()).item() if low.any() else float("nan")


def draw_policy_timeline(lag: int = 2, reuse: int = 3, iteration: int = 3) -> None:
    """The three policies of one iteration on a timeline of optimizer updates: mu (the sampler's weights, `lag`
    iterations old, in its own numerics), pi_old (recomputed at the iteration's start) and pi (its `reuse` updates)."""
    import matplotlib.pyplot as plt

    k, R, i = lag, reuse, iteration
    start = {j: j * R for j in range(i + 2)}  # the optimizer update at which iteration j begins
    fig, ax = plt.subplots(figsize=(9, 2.1))
    ax.plot([0, start[i + 1] + 0.5], [0, 0], color="0.6", lw=1)
    for u in range(start[i + 1] + 1):
        ax.plot([u], [0], "|", color="0.3" if u % R == 0 else "0.7", ms=12 if u % R == 0 else 6)
    ax.annotate("μ: the learner's weights at the start of\niteration i − k, run by the sampler in its\nown numerics, "
                "draw the batch", xy=(start[i - k], 0), xytext=(start[i - k] - 2.5, 0.55), fontsize=8,
                arrowprops=dict(arrowstyle="->"))
    ax.annotate("π_old: the learner at the start of iteration i\nrecomputes log-probs of that batch\n(one no-grad forward)",
                xy=(start[i], 0), xytext=(start[i] - 1.5, 0.55), fontsize=8, arrowprops=dict(arrowstyle="->"))
    ax.axvspan(start[i], start[i + 1], ymin=0.38, ymax=0.62, color="tab:red", alpha=0.2)
    ax.text((start[i] + start[i + 1]) / 2, -0.65, "π: the R optimizer\nupdates on the batch", ha="center", fontsize=8,
            color="tab:red")
    ax.annotate("", xy=(start[i - k], -0.2), xytext=(start[i], -0.2), arrowprops=dict(arrowstyle="<->", color="0.3"))
    ax.text((start[i - k] + start[i]) / 2, -0.65, "staleness: --lag k iterations\n= k·R optimizer updates", ha="center",
            fontsize=8)
    ax.set(xlim=(-0.5, start[i + 1] + 1), ylim=(-1.0, 1.3), yticks=[],
           xlabel=f"optimizer update (drawn with k = {k}, R = {R}; long ticks: an iteration begins)")
    ax.set_xticks([start[i - k], start[i], start[i + 1]], ["(i − k)·R", "i·R", "(i + 1)·R"])
    ax.grid(False)
    fig.tight_layout()
    plt.show()


def load_quietly(cfg):
    """(task, model, tokenizer) of a TrainConfig as train.py builds them, the warm start's provenance lines silenced."""
    import contextlib
    import io

    from nano_respo.rollout import policy_logprobs
    from nano_respo.sft import initial_model
    from nano_respo.tasks import make_task

    task = make_task(cfg.task, cfg.task_size, cfg.eval_problems, cfg.heldout_file, seed=0)
    task.check_budget(cfg.max_new_tokens)
    torch.manual_seed(cfg.seed)
    with contextlib.redirect_stdout(io.StringIO()):  # the warm start prints where it comes from (shipped)
        model, tokenizer = initial_model(cfg, task, "cpu", policy_logprobs)
    return task, model, tokenizer


# --- Core 04's two warm policies on the digit-sum bandit (deeper/branches_explored §11 reads them batch by batch) ---

WARM_AGG = "seq-mean-token-sum-norm"  # the warm-up's and the drift's aggregation, as in research's starvation_controls
POLICY_BATCHES = {1: (6, 7, 8, 9, 10), 2: (16, 17, 18, 19, 20)}  # warm-up seed: the seeds of its five batches


def warm_policy(env, seed):
    """research/notebooks/starvation_controls §1's warm-up: 15 rollout batches of 16 prompts x 8, each reused as 4
    mini-batches, under the reconstruction respo_wtilt (VESPO's family at (0, 0.1) on positives, (3, 2) on negatives)."""
    torch.manual_seed(seed)
    policy = env.make_policy()
    cfg = LossConfig(method="vespo", agg=WARM_AGG, vespo_k_pos=0.0, vespo_lambda_pos=0.1, vespo_k_neg=3.0,
                     vespo_lambda_neg=2.0)
    optimizer = torch.optim.Adam(policy.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(15):
        prompts = env.train_prompts[torch.randint(len(env.train_prompts), (16,), generator=generator)].repeat_interleave(8)
        batch = env.sample(policy, prompts, generator)
        adv, _ = group_advantages(env.reward(batch), 8)
        for groups in torch.randperm(16, generator=generator).view(4, -1):
            rows = (groups[:, None] * 8 + torch.arange(8)).reshape(-1)
            part = batch[rows]
            loss, _ = policy_loss(env.log_probs(policy, part), part.old_logp, adv[rows], part.mask, cfg)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
            optimizer.step()
    return policy


def draw_batch(env, policy, seed):
    """32 prompts x 8 responses from `policy` and their group advantages."""
    generator = torch.Generator().manual_seed(seed)
    prompts = env.train_prompts[torch.randint(len(env.train_prompts), (32,), generator=generator)].repeat_interleave(8)
    batch = env.sample(policy, prompts, generator)
    return batch, group_advantages(env.reward(batch), 8)[0]


def clip_drift(env, policy, batch, adv, steps=8):
    """A copy of `policy` takes `steps` full-batch sequence-clip steps (Adam, lr 0.01) on `batch`: [steps, B, T]
    log-probs before each step."""
    import copy

    learner = copy.deepcopy(policy)
    optimizer = torch.optim.Adam(learner.parameters(), lr=0.01)
    cfg = LossConfig(method="seq_clip", agg=WARM_AGG)
    seen = []
    for _ in range(steps):
        logp = env.log_probs(learner, batch)
        seen.append(logp.detach())
        loss, _ = policy_loss(logp, batch.old_logp, adv, batch.mask, cfg)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(learner.parameters(), 1.0)
        optimizer.step()
    return torch.stack(seen)


def response_gradients(env, policy, batch):
    """[B, P] grad log pi(y) of every response of `batch` under `policy` (autograd, one response at a time)."""
    params = list(policy.parameters())
    seq_logp = (env.log_probs(policy, batch) * batch.mask).sum(-1)
    return torch.stack([torch.cat([g.reshape(-1) for g in torch.autograd.grad(seq_logp[i], params, retain_graph=True)])
                        for i in range(len(seq_logp))])


def per_response(logp, batch, adv, method):
    """Each response's coefficient under `method` (a token method's: its mean over the response's tokens)."""
    phi, _ = coefficients(logp, batch.old_logp, adv, batch.mask, LossConfig(method=method))
    return (phi * batch.mask).sum(-1) / batch.mask.sum(-1)

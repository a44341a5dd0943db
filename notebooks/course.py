"""What the course notebooks share: a one-line check and an enumerable sequence space.

Nothing here is loss math: every coefficient the notebooks use comes from
nano_respo.kernel. This module holds the toy *policy* the derivations are checked on
(a tabular autoregressive policy small enough to sum over every sequence exactly) and
the line that prints each check.
"""

from __future__ import annotations

import itertools

import torch


def confirm(claim: str, error: float, tol: float) -> None:
    """Print one line: the claim and whether the numbers agree within tol; raise if they do not."""
    error = float(error)
    if not error <= tol:
        raise AssertionError(f"{claim}: error {error:.3g} exceeds {tol:.0e}")
    print(f"✓ {claim}  (error < {tol:.0e})")


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

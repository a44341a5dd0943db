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


class EndedSpace:
    """Every response of 0 to max_len - 1 content tokens over `vocab` symbols, then an end token.

    A tabular autoregressive policy over vocab + 1 choices (the last one ends the response) at
    every prefix of content tokens; after max_len - 1 content tokens the end is forced. Responses
    have different lengths, so expectations over them are exact sums over all of them: the space
    notebook 02 §6 plants a long correct response in.
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

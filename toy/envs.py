"""Two toy environments where rollout reuse produces low-weight positives, on a CPU in seconds.

Both expose the same small interface the training loop needs:

    env.sample(policy, prompts, generator) -> Episodes   (tokens, mask, behaviour log-probs)
    env.log_probs(policy, episodes)        -> [B, T]      per-token log pi_theta of those tokens
    env.reward(episodes)                   -> [B]         the verifier, 0/1
    env.train_prompts / env.heldout_prompts              1-D long tensors of prompt ids

FactorisedBandit: one prompt, L positions, K arms each, a tabular softmax per position.
The reward is 1 when at least `need` positions hit a hidden target arm. Correct and wrong
responses share most of their tokens, so pushing a negative down also pulls some positives'
weights below 1: the mechanism of the sequence bandit in its smallest form.

DigitSum: an autoregressive sequence bandit. The prompt is a target t; the policy emits
digits 0..D-1 and an end token; the reward is 1 exactly when the digits sum to t and the
end token was emitted within max_len tokens. Large targets need long responses that the
initial policy rarely produces (it ends early): they are the under-generated positives.
An MLP reads (previous token, the remaining sum) at every step, so the policy can carry what
it learnt to targets it was never trained on (the held-out set).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

ENVS = ("seq", "bandit")


@dataclass
class Episodes:
    """A rollout batch: what the behaviour policy mu did and how likely it found it."""

    prompts: torch.Tensor  # [B] prompt ids (targets for DigitSum, 0 for the bandit)
    tokens: torch.Tensor  # [B, T] sampled token ids (padding = 0 after the end)
    mask: torch.Tensor  # [B, T] bool, 1 on response tokens (the end token included)
    old_logp: torch.Tensor  # [B, T] log mu of each token, stored at sampling time

    def __getitem__(self, index) -> "Episodes":
        return Episodes(self.prompts[index], self.tokens[index], self.mask[index], self.old_logp[index])


# --- The factorised K-armed bandit ------------------------------------------------------

class TabularPolicy(nn.Module):
    def __init__(self, positions: int, arms: int):
        super().__init__()
        self.logits = nn.Parameter(torch.zeros(positions, arms))  # [L, K]


class FactorisedBandit:
    name = "bandit"

    def __init__(self, positions: int = 8, arms: int = 4, need: int = 5, seed: int = 0):
        if not 1 <= need <= positions:
            raise ValueError(f"need: must lie in [1, positions={positions}], got {need}")
        self.positions, self.arms, self.need = positions, arms, need
        g = torch.Generator().manual_seed(10_000 + seed)
        self.target = torch.randint(arms, (positions,), generator=g)  # [L] the hidden correct arms
        self.train_prompts = torch.zeros(1, dtype=torch.long)
        self.heldout_prompts = torch.zeros(1, dtype=torch.long)

    def make_policy(self, hidden: int = 0) -> TabularPolicy:
        return TabularPolicy(self.positions, self.arms)

    @torch.no_grad()
    def sample(self, policy: TabularPolicy, prompts: torch.Tensor, generator: torch.Generator) -> Episodes:
        probs = torch.softmax(policy.logits, -1).expand(len(prompts), -1, -1)  # [B, L, K]
        tokens = torch.multinomial(probs.reshape(-1, self.arms), 1, generator=generator).view(len(prompts), -1)
        mask = torch.ones_like(tokens, dtype=torch.bool)  # [B, L]
        episodes = Episodes(prompts, tokens, mask, torch.zeros(tokens.shape))
        episodes.old_logp = self.log_probs(policy, episodes)
        return episodes

    def log_probs(self, policy: TabularPolicy, episodes: Episodes) -> torch.Tensor:
        logp = torch.log_softmax(policy.logits, -1)  # [L, K]
        return logp.gather(1, episodes.tokens.T).T  # [B, L]

    def reward(self, episodes: Episodes) -> torch.Tensor:
        hits = (episodes.tokens == self.target).sum(-1)  # [B]
        return (hits >= self.need).float()

    @torch.no_grad()
    def expected_reward(self, policy: TabularPolicy) -> float:
        """P(hits >= need) exactly: a dynamic programme over positions (Poisson binomial)."""
        p_hit = torch.softmax(policy.logits.double(), -1).gather(1, self.target[:, None]).squeeze(1)  # [L]
        count = torch.zeros(self.positions + 1, dtype=torch.float64)
        count[0] = 1.0
        for p in p_hit:
            count = torch.cat([count[:1] * (1 - p), count[1:] * (1 - p) + count[:-1] * p])
        return count[self.need:].sum().item()


# --- The digit-sum sequence bandit ------------------------------------------------------

class DigitPolicy(nn.Module):
    """MLP over (previous token, remaining-sum features, time) -> logits over digits and the end token.

    The remaining sum is a function of the previous tokens, so this is an autoregressive
    policy; it needs no recurrence, which keeps the teacher-forced pass one batched call.
    """

    def __init__(self, vocab: int, feature_dim: int, hidden: int = 32):
        super().__init__()
        self.embed = nn.Embedding(vocab + 1, hidden)  # the extra id is the start token
        self.features = nn.Linear(feature_dim, hidden)
        self.body = nn.Sequential(nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, vocab))

    def forward(self, prev: torch.Tensor, feats: torch.Tensor) -> torch.Tensor:
        return self.body(self.embed(prev) + self.features(feats))  # [..., V]


class DigitSum:
    name = "seq"

    def __init__(self, digits: int = 4, max_len: int = 16, train_targets=None, heldout_targets=None):
        self.digits, self.max_len = digits, max_len
        self.end = digits  # token id of the end token; digits are 0..digits-1
        self.vocab = digits + 1
        heldout = heldout_targets or [17, 23, 29, 35, 38, 40]  # 38 and 40 lie beyond every training target
        train = train_targets or [t for t in range(12, 37) if t not in heldout]
        reachable = (digits - 1) * (max_len - 1)
        for name, targets in (("train_targets", train), ("heldout_targets", heldout)):
            if max(targets) > reachable or min(targets) < 0:
                raise ValueError(f"{name}: targets must lie in [0, {reachable}] for digits={digits}, max_len={max_len}")
        self.train_prompts = torch.tensor(train)
        self.heldout_prompts = torch.tensor(heldout)

    def make_policy(self, hidden: int = 32) -> DigitPolicy:
        return DigitPolicy(self.vocab, self.feature_dim, hidden)

    feature_dim = 3

    def features(self, remaining: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        """[..., 3]: remaining sum (a scalar, so no exact 'zero left' bit to read off), overshoot, time."""
        scale = (remaining.float() / 10)[..., None]  # [..., 1]
        overshoot = (remaining < 0).float()[..., None]  # [..., 1]
        time = (step.float() / self.max_len)[..., None]  # [..., 1]
        return torch.cat([scale, overshoot, time], -1)

    def digit_values(self, tokens: torch.Tensor) -> torch.Tensor:
        return torch.where(tokens < self.end, tokens, torch.zeros_like(tokens))

    @torch.no_grad()
    def sample(self, policy: DigitPolicy, prompts: torch.Tensor, generator: torch.Generator) -> Episodes:
        batch = len(prompts)
        prev = torch.full((batch,), self.vocab, dtype=torch.long)  # start token
        remaining = prompts.clone()
        alive = torch.ones(batch, dtype=torch.bool)
        tokens = torch.zeros(batch, self.max_len, dtype=torch.long)
        mask = torch.zeros(batch, self.max_len, dtype=torch.bool)
        for t in range(self.max_len):
            logits = policy(prev, self.features(remaining, torch.full_like(remaining, t)))  # [B, V]
            tok = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator).squeeze(1)  # [B]
            tokens[:, t] = torch.where(alive, tok, torch.zeros_like(tok))
            mask[:, t] = alive
            remaining = remaining - torch.where(alive, self.digit_values(tok), torch.zeros_like(tok))
            alive = alive & (tok != self.end)
            prev = tok
            if not alive.any():
                break
        used = int(mask.sum(-1).max())
        episodes = Episodes(prompts, tokens[:, :used], mask[:, :used], torch.zeros(batch, used))
        # Recomputed by the same teacher-forced pass the update uses, so that w = 1 exactly
        # at the first optimizer step on this batch.
        episodes.old_logp = self.log_probs(policy, episodes)
        return episodes

    def log_probs(self, policy: DigitPolicy, episodes: Episodes) -> torch.Tensor:
        tokens = episodes.tokens  # [B, T]
        start = torch.full_like(tokens[:, :1], self.vocab)
        prev = torch.cat([start, tokens[:, :-1]], 1)  # [B, T]
        spent = torch.cumsum(self.digit_values(tokens), 1) - self.digit_values(tokens)  # [B, T] sum before t
        remaining = episodes.prompts[:, None] - spent  # [B, T]
        steps = torch.arange(tokens.shape[1]).expand_as(tokens)  # [B, T]
        logits = policy(prev, self.features(remaining, steps))  # [B, T, V]
        return torch.log_softmax(logits, -1).gather(-1, tokens[..., None]).squeeze(-1)  # [B, T]

    def reward(self, episodes: Episodes) -> torch.Tensor:
        """1 when the response ends with the end token and its digits sum to the target."""
        tokens, mask = episodes.tokens, episodes.mask
        digit_sum = (self.digit_values(tokens) * mask).sum(-1)  # [B]
        lengths = mask.sum(-1)  # [B]
        last = tokens.gather(1, (lengths - 1).clamp(min=0)[:, None]).squeeze(1)  # [B]
        ended = (lengths > 0) & (last == self.end)
        return (ended & (digit_sum == episodes.prompts)).float()


def make_env(name: str, seed: int = 0):
    if name == "seq":
        return DigitSum()
    if name == "bandit":
        return FactorisedBandit(seed=seed)
    raise ValueError(f"env: unknown environment {name!r}; choose one of {', '.join(ENVS)}")

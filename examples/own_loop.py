"""The ReSPO loss in a loop of your own (model, task, sampling); nano_respo.kernel gives advantages and loss.
Task: after a digit d write d+1 d+2 d+3 (mod 10), reward = the share right; learnt in seconds on a CPU."""

import torch
from torch import nn

from nano_respo.kernel import LossConfig, group_advantages, policy_loss

PROMPTS, GROUP, LENGTH, REUSE, ITERATIONS = 16, 8, 3, 4, 30  # REUSE mini-batches of whole groups per batch


class TinyPolicy(nn.Module):
    """A GRU over the prompt digit and the answer so far -> logits of the next digit."""

    def __init__(self, vocab: int = 10, hidden: int = 64):
        super().__init__()
        self.embed, self.gru, self.head = nn.Embedding(vocab, hidden), nn.GRU(hidden, hidden, batch_first=True), \
            nn.Linear(hidden, vocab)

    def forward(self, tokens):  # [B, L] -> [B, L, vocab]
        return self.head(self.gru(self.embed(tokens))[0])


@torch.no_grad()
def sample(model, prompts):
    """LENGTH digits after each prompt, at temperature 1, and the log-prob each had when it was drawn."""
    tokens, logps = prompts[:, None], []
    for _ in range(LENGTH):
        draw = torch.distributions.Categorical(logits=model(tokens)[:, -1])
        token = draw.sample()
        tokens, logps = torch.cat([tokens, token[:, None]], 1), logps + [draw.log_prob(token)]
    return tokens[:, 1:], torch.stack(logps, 1)  # [B, LENGTH] each


def logprobs(model, prompts, answers):  # [B, LENGTH] under the current weights, with their gradient
    logits = model(torch.cat([prompts[:, None], answers[:, :-1]], 1))
    return torch.log_softmax(logits, -1).gather(-1, answers[..., None]).squeeze(-1)


torch.manual_seed(0)
model, cfg = TinyPolicy(), LossConfig(method="respo")  # or grpo, seq_clip, gspo, cispo, ...
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
for iteration in range(ITERATIONS):
    prompts = torch.randint(0, 10, (PROMPTS,)).repeat_interleave(GROUP)  # each prompt's group contiguous
    answers, old_logp = sample(model, prompts)  # old_logp: of the policy that sampled, recorded while sampling
    rewards = (answers == (prompts[:, None] + torch.arange(1, LENGTH + 1)) % 10).float().mean(1)
    advantages, _ = group_advantages(rewards, GROUP)
    mask = torch.ones_like(old_logp)  # every answer is LENGTH digits: no padding
    for groups in torch.randperm(PROMPTS).chunk(REUSE):  # rollout reuse: REUSE steps on one batch
        rows = (groups[:, None] * GROUP + torch.arange(GROUP)).flatten()
        loss, _ = policy_loss(logprobs(model, prompts[rows], answers[rows]), old_logp[rows], advantages[rows],
                              mask[rows], cfg)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"iteration {iteration:2d}  reward {rewards.mean():.2f}")

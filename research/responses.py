"""Every optimizer step's responses as the loss saw them, from a training loop run in-process as train.py runs it.

    run = read_run(train_config)      # run.rows (per response and step), run.rollouts, run.records, run.heldout

`read_run` is train.py's loop (run.session.start, then run.loop.train's) without the run directory: the same
seed before the warm start, the same optimizer, sampler, lag and routes, so on one machine its optimizer steps
equal train.py's for the same flags (research/tests/test_responses.py checks it line by line). The reader wraps the
training forward that trainer.rl_step hands to the loss and records, for each response of each mini-batch, the
prompt's family and target, the response, its length, reward and advantage, and its sequence log-weight
log w = log pi - log mu (the true product): what every sequence-level method's coefficient is a function of, so
any of them can be read off afterwards; asked (`own_phi`), also each response's mean coefficient under the run's
own loss (a token-level method's is not a function of log w). It only reads: the log-probs reach the loss unchanged.

For the digit tasks (digit_sum, digit_conflict), whose prompts name a family and a target ("sum 12", "ones 14").
"""

from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass

import torch

from nano_respo.config import TrainConfig, hash_seed
from nano_respo.evaluation import evaluate
from nano_respo.kernel import LossConfig, coefficients, masked_sum, sequence_log_weight
from nano_respo.rollout import policy_logprobs

DIGIT_PROMPT = re.compile(r"(sum|ones) (\d+)")
ROW_KEYS = ("iteration", "step", "family", "target", "response", "length", "reward", "advantage", "log_w")


def family_and_target(prompt: str) -> tuple[str, int]:
    """("sum" or "ones", t) of a digit prompt, also inside its chat template."""
    match = DIGIT_PROMPT.search(prompt)
    if match is None:
        raise ValueError(f"prompt: {prompt!r} names no digit family and target")
    return match[1], int(match[2])


class ResponseReader:
    """Collects ROW_KEYS columns, one entry per response per optimizer step (rl_step's forward, one per step)."""

    def __init__(self, tokenizer, loss: LossConfig | None = None):
        self.tokenizer, self.loss = tokenizer, loss
        self.rows = {key: [] for key in ROW_KEYS + (("phi",) if loss else ())}
        self.iteration, self.step = 0, 0

    def wrap(self, route=policy_logprobs):
        """The training forward `route`, reading what rl_step's loss is handed (learner_logprobs, which asks
        without entropy, computes pi_old and is not read)."""
        def reading(model, micro, temperature, with_entropy=False):
            out = route(model, micro, temperature, with_entropy=with_entropy)
            if with_entropy:
                self.read(micro, out[0].detach())
            return out
        return reading

    def read(self, micro, logp: torch.Tensor) -> None:
        mask = micro.completion_mask
        width = mask.shape[1]
        prompts = self.tokenizer.batch_decode(micro.input_ids[:, :-width], skip_special_tokens=True)
        responses = self.tokenizer.batch_decode(torch.where(mask, micro.input_ids[:, -width:], self.tokenizer.pad_token_id),
                                                skip_special_tokens=True)
        self.step += 1
        columns = {"iteration": [self.iteration] * len(prompts), "step": [self.step] * len(prompts),
                   "family": [family_and_target(p)[0] for p in prompts],
                   "target": [family_and_target(p)[1] for p in prompts], "response": responses,
                   "length": mask.sum(-1).tolist(), "reward": micro.rewards.tolist(),
                   "advantage": micro.advantages.tolist(),
                   "log_w": sequence_log_weight(logp, micro.old_logp, mask).tolist()}
        if self.loss:  # the run's own coefficient, averaged over each response's tokens
            phi, _ = coefficients(logp, micro.old_logp, micro.advantages, mask, self.loss)  # [b, c]
            columns["phi"] = (masked_sum(phi, mask) / mask.sum(-1).clamp(min=1)).tolist()
        for key, values in columns.items():
            self.rows[key] += values


@dataclass
class ReadRun:
    rows: dict[str, list]
    """ROW_KEYS columns: one entry per response per optimizer step."""
    rollouts: list[dict[str, list[int]]]
    """Per rollout batch: {"family target": [correct, samples]}."""
    records: list[dict]
    """trainer.rl_iteration's records (train.py's `train` lines without their timing and policy_lag)."""
    heldout: dict | None = None
    """evaluation.evaluate at the end (train.py's last `eval` line), when asked for."""


def rollout_counts(task, cfg: TrainConfig, iteration: int, rewards: torch.Tensor) -> dict[str, list[int]]:
    """{"family target": [correct, samples]} of one rollout batch: its prompts are drawn as collect_rollouts draws them."""
    problems = task.train_batch(cfg.prompts_per_iteration, seed=hash_seed("rl", cfg.seed, iteration))
    counts: dict[str, list[int]] = {}
    for problem, reward in zip([p for p in problems for _ in range(cfg.group_size)], rewards.tolist()):
        cell = counts.setdefault(" ".join(map(str, family_and_target(problem.prompt))), [0, 0])
        cell[0] += reward > 0
        cell[1] += 1
    return counts


def read_run(cfg: TrainConfig, heldout: bool = False, quiet: bool = True, own_phi: bool = False) -> ReadRun:
    """cfg's run as train.py runs it on the CPU (warm start from the cache, or trained into it), read step by step;
    own_phi: each row also holds the response's mean coefficient under cfg's loss."""
    from nano_respo.run.session import build_task, initial_model, off_policy_of, routes
    from nano_respo.trainer import rl_iteration

    if cfg.micro_batch is not None or cfg.fsdp or cfg.resume:
        raise ValueError("read_run: one process, whole mini-batches, from the start (no --micro-batch, --fsdp, --resume)")
    torch.set_num_threads(cfg.threads)
    task = build_task(cfg)
    torch.manual_seed(cfg.seed)  # as run.session.start does before the model is built
    with contextlib.redirect_stdout(io.StringIO()) if quiet else contextlib.nullcontext():
        model, tokenizer = initial_model(cfg, task, "cpu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    off_policy = off_policy_of(cfg, model, None)
    reader = ResponseReader(tokenizer, cfg.step_loss if own_phi else None)
    _, rl_logprobs, decoder = routes(cfg)  # the training forward and decode loop train.py takes for these flags
    logprobs = reader.wrap(rl_logprobs)
    rollouts, records, step = [], [], 0
    for iteration in range(cfg.iterations):
        model.train()
        reader.iteration = iteration
        batch, step_records, step = rl_iteration(model, tokenizer, task, optimizer, cfg, iteration, step, logprobs,
                                                 decoder=decoder, off_policy=off_policy)
        rollouts.append(rollout_counts(task, cfg, iteration, batch.rewards))
        records += step_records
    end = evaluate(model, tokenizer, task, cfg.max_new_tokens, cfg.temperature, cfg.eval_samples,
                   batch_size=cfg.rollout_batch or 256) if heldout else None
    return ReadRun(reader.rows, rollouts, records, end)

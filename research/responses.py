"""Every optimizer step's responses as the loss saw them, from train.py's own loop run in-process.

    run = read_run(train_config)      # run.rows (per response and step), run.rollouts, run.records, run.heldout

`read_run` runs `train.train(cfg, watch=reader)` in a temporary run directory on the CPU: the one training loop
of the repository, with the `watch` hook that train.rl_step calls once per optimizer step, before the optimizer
steps, with the mini-batch, the detached log pi and the coefficient the loss applied. The reader records, for
each response of each mini-batch, the prompt's family and target, the response, its length, reward and advantage,
and its sequence log-weight log w = log pi - log mu (the true product): what every sequence-level method's
coefficient is a function of, so any of them can be read off afterwards; asked (`own_phi`), also each response's
mean coefficient as the run's own loss applied it (a token-level method's is not a function of log w). It only
reads: the step is train.py's. The run's records and held-out figures are read back from its metrics.jsonl
(research/tests/test_responses.py checks that the rows line up with them).

For the digit tasks (digit_sum, digit_conflict), whose prompts name a family and a target ("sum 12", "ones 14").
"""

from __future__ import annotations

import contextlib
import io
import re
import tempfile
from dataclasses import dataclass, replace

import torch

import train
from nano_respo.checkpoint import latest_checkpoint
from nano_respo.kernel import masked_sum, sequence_log_weight
from nano_respo.runs import read_metrics
from train import TrainConfig

DIGIT_PROMPT = re.compile(r"(sum|ones) (\d+)")
ROW_KEYS = ("iteration", "step", "family", "target", "response", "length", "reward", "advantage", "log_w")


def family_and_target(prompt: str) -> tuple[str, int]:
    """("sum" or "ones", t) of a digit prompt, also inside its chat template."""
    match = DIGIT_PROMPT.search(prompt)
    if match is None:
        raise ValueError(f"prompt: {prompt!r} names no digit family and target")
    return match[1], int(match[2])


# rl_step's skips that return before the watch is called (the others, a non-finite gradient, come after it).
BEFORE_THE_WATCH = ("non-finite log-prob", "non-finite loss")


def watched_run(cfg: TrainConfig, watch, quiet: bool = True) -> tuple[list[dict], list[dict], object]:
    """cfg's run by train.train on the CPU in a temporary run directory, watch(batch, logp, phi) called at every
    optimizer step: (the run's metrics.jsonl records, the `train` record of each step the watch saw in the order it
    saw them, the run's tokenizer from its last checkpoint). quiet: train.py's printing left out."""
    from transformers import AutoTokenizer

    if cfg.routes.fsdp or cfg.resume:
        raise ValueError("watched_run: one process, from the start (no --fsdp, --resume)")
    with tempfile.TemporaryDirectory() as out:
        with contextlib.redirect_stdout(io.StringIO()) if quiet else contextlib.nullcontext():
            run_dir = train.train(replace(cfg, out_dir=out, name="run", plots=False, device="cpu"), watch=watch)
        records = read_metrics(run_dir)
        tokenizer = AutoTokenizer.from_pretrained(latest_checkpoint(run_dir))
    watched = [r for r in records if r["kind"] == "train" and r.get("skip_reason") not in BEFORE_THE_WATCH]
    return records, watched, tokenizer


class ResponseReader:
    """train.rl_step's watch: keeps what the loss saw at each optimizer step it is called at; `rows` decodes it
    after the run, with the run's tokenizer, into ROW_KEYS columns placed at the run's own steps."""

    def __init__(self, own_phi: bool = False):
        self.own_phi = own_phi
        self.steps = []  # per call of the watch: the mini-batch's tokens and what the loss read of each response

    def __call__(self, batch, logp: torch.Tensor, phi: torch.Tensor) -> None:
        mask = batch.completion_mask
        seen = {"input_ids": batch.input_ids.cpu(), "mask": mask.cpu(), "reward": batch.rewards.tolist(),
                "advantage": batch.advantages.tolist(), "log_w": sequence_log_weight(logp, batch.old_logp, mask).tolist()}
        if self.own_phi:  # the run's own coefficient as its loss applied it, averaged over each response's tokens
            seen["phi"] = (masked_sum(phi, mask) / mask.sum(-1).clamp(min=1)).tolist()
        self.steps.append(seen)

    def rows(self, tokenizer, watched: list[dict]) -> dict[str, list]:
        """ROW_KEYS columns (and phi), one entry per response per call; watched: the train record of each call."""
        if len(self.steps) != len(watched):
            raise ValueError(f"ResponseReader: {len(self.steps)} steps read, {len(watched)} steps watched")
        rows = {key: [] for key in ROW_KEYS + (("phi",) if self.own_phi else ())}
        for seen, record in zip(self.steps, watched):
            width = seen["mask"].shape[1]
            prompts = tokenizer.batch_decode(seen["input_ids"][:, :-width], skip_special_tokens=True)
            responses = tokenizer.batch_decode(torch.where(seen["mask"], seen["input_ids"][:, -width:],
                                                           tokenizer.pad_token_id), skip_special_tokens=True)
            named = [family_and_target(p) for p in prompts]
            columns = {"iteration": [record["iteration"]] * len(prompts), "step": [record["step"]] * len(prompts),
                       "family": [f for f, _ in named], "target": [t for _, t in named], "response": responses,
                       "length": seen["mask"].sum(-1).tolist(), "reward": seen["reward"],
                       "advantage": seen["advantage"], "log_w": seen["log_w"],
                       **({"phi": seen["phi"]} if self.own_phi else {})}
            for key, values in columns.items():
                rows[key] += values
        return rows


@dataclass
class ReadRun:
    rows: dict[str, list]
    """ROW_KEYS columns: one entry per response per optimizer step."""
    rollouts: list[dict[str, list[int]]]
    """Per rollout batch: {"family target": [correct, samples]}."""
    records: list[dict]
    """The run's `train` records (its metrics.jsonl's; a non-finite float is None there)."""
    heldout: dict
    """The held-out figures at the end (the heldout_* keys of the run's last `eval` record)."""


def rollout_counts(rows: dict[str, list], records: list[dict]) -> list[dict[str, list[int]]]:
    """{"family target": [correct, samples]} of each rollout batch, read off its first epoch's steps, which hold
    every response of the batch once."""
    batch_of = {r["step"]: r["iteration"] for r in records if r["epoch"] == 0}
    counts: list[dict[str, list[int]]] = [{} for _ in range(1 + max((r["iteration"] for r in records), default=-1))]
    for step, family, target, reward in zip(rows["step"], rows["family"], rows["target"], rows["reward"]):
        if step in batch_of:
            cell = counts[batch_of[step]].setdefault(f"{family} {target}", [0, 0])
            cell[0] += reward > 0
            cell[1] += 1
    return counts


def read_run(cfg: TrainConfig, quiet: bool = True, own_phi: bool = False) -> ReadRun:
    """cfg's run as train.py runs it, on the CPU (warm start from the cache, or trained into it), read step by step;
    own_phi: each row also holds the response's mean coefficient as cfg's loss applied it."""
    reader = ResponseReader(own_phi)
    records, watched, tokenizer = watched_run(cfg, reader, quiet)
    rows = reader.rows(tokenizer, watched)
    train_records = [r for r in records if r["kind"] == "train"]
    heldout = {k: v for k, v in next(r for r in reversed(records) if r["kind"] == "eval").items()
               if k.startswith("heldout")}
    return ReadRun(rows, rollout_counts(rows, train_records), train_records, heldout)

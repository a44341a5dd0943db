"""The training loop of train.py: `train(cfg)` repeats trainer.rl_iteration inside an open run.

    for each iteration:
        sample G completions for each of P prompts, recording log mu      (trainer.collect_rollouts;
            mu = the current weights, or with --lag k those of k iterations earlier)
        reward, group advantages                                           (kernel)
        reuse = epochs x mini-batches optimizer steps on this batch        (trainer.rl_step)
        log; every eval_every iterations evaluate held-out; every save_every checkpoint

What keeps a run alive around this loop (its directory and lock, resume, Ctrl-C, saves, the
metrics log) is run/session.py. Under torchrun --fsdp the same loop runs on every rank; what
differs is confined to the `ranks` object (trainer.OneProcess here, scale.distributed.Ranks there).
"""

from __future__ import annotations

import time

from ..config import TrainConfig
from ..trainer import ONE_PROCESS, rl_iteration
from .session import open_run


def train(cfg: TrainConfig):
    """Run (or resume) training; returns the run directory. A stop signal (Ctrl-C, SIGTERM, ...) finishes the
    iteration, saves, then raises session.Stopped, whose exit_code train.py exits with. docs/training.md explains
    every flag and metric."""
    with open_run(cfg) as run:  # directory locked, model loaded (or resumed), held-out evaluated at the start
        model, optimizer = run.model, run.optimizer
        for iteration in run.iterations():  # a progress bar; Ctrl-C or SIGTERM ends it after a save
            start = time.perf_counter()
            model.train()
            for group in optimizer.param_groups:  # a function of the iteration, so a resumed run sets the same
                group["lr"] = cfg.lr_at(iteration)
            with run.amp:
                _, records, run.step = rl_iteration(model, run.tokenizer, run.task, optimizer, cfg, iteration,
                                                    run.step, run.logprobs, run.ranks or ONE_PROCESS, run.decoder,
                                                    run.off_policy)
            run.log(iteration, records, seconds=time.perf_counter() - start)
            done = iteration + 1
            if done % cfg.eval_every == 0 or done == cfg.iterations:
                run.evaluate(done)
            if done % cfg.save_every == 0 or done == cfg.iterations or run.stop.requested:
                run.save(done)
    return run.dir

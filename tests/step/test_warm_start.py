"""The warm start's recipe: supervised training to convergence, easy problems first.

Its end point must not depend on where a short run happens to stop: the task size grows
over the first half (a curriculum), the learning rate anneals to zero, label smoothing gives
the optimum a known place, `sft` reports how much of its data the model reproduces, and the
cache key holds every setting of the recipe (a changed recipe is trained again).
"""

import os
import re

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from nano_respo import sft  # noqa: E402
from nano_respo.cli import from_flat  # noqa: E402
from nano_respo.models import load_model  # noqa: E402
from nano_respo.rollout import sample  # noqa: E402
from nano_respo.tasks import Problem, Task, make_task  # noqa: E402

pytestmark = pytest.mark.usefixtures("model_cache")


def test_the_learning_rate_anneals_from_its_peak_to_zero():
    rates = [sft.cosine_lr(3e-3, step, 200) for step in range(200)]
    assert rates[0] == 3e-3
    assert all(later < earlier for earlier, later in zip(rates, rates[1:]))
    assert rates[-1] < 1e-6


def test_every_setting_of_the_recipe_is_in_the_cache_key():
    task = make_task("reverse", size=8)
    settings = dict(steps=1000, batch_size=64, lr=3e-3, seed=0, dtype="float32")
    key = sft.warm_start_key("tiny-qwen3", task, **settings)
    assert key["lr_schedule"] == sft.LR_SCHEDULE and key["curriculum"] == sft.CURRICULUM
    changed = dict(steps=999, batch_size=32, lr=1e-3, seed=1, dtype="bfloat16", label_smoothing=0.02,
                   anneal="converged")
    for name, value in changed.items():
        assert sft.warm_start_key("tiny-qwen3", task, **{**settings, name: value}) != key, name
    assert sft.warm_start_key("tiny-qwen3-moe", task, **settings) != key
    assert sft.warm_start_key("tiny-qwen3", make_task("reverse", size=9), **settings) != key


def test_the_cache_key_sees_the_code_version_the_libraries_and_the_cpu_setting(monkeypatch):
    """Raise the warm start's code version (an edit of what it computes), upgrade torch or transformers or change
    the CPU setting, and a cached warm start is no longer taken for this one."""
    task = make_task("reverse", size=8)
    settings = dict(steps=1000, batch_size=64, lr=3e-3, seed=0, dtype="float32")
    key = sft.warm_start_key("tiny-qwen3", task, **settings)
    assert sft.warm_start_key("tiny-qwen3", task, **settings) == key  # the same inputs, the same entry
    assert key["code"] == f"v{sft.WARM_START_VERSION}"
    edits = [(sft, "WARM_START_VERSION", sft.WARM_START_VERSION + 1), (sft.torch, "__version__", "0.0"),
             (sft, "version", lambda package: "0.0"), (sft, "cpu_setting", lambda: "another CPU")]
    for module, name, value in edits:
        with monkeypatch.context() as edit:
            edit.setattr(module, name, value)
            assert sft.warm_start_key("tiny-qwen3", task, **settings) != key, name
    assert sft.warm_start_key("tiny-qwen3", task, **settings) == key
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")  # read when a process starts: a fresh one sees it
    import subprocess
    import sys
    code = ("from nano_respo import sft; from nano_respo.tasks import make_task; "
            "print(sft.warm_start_key('tiny-qwen3', make_task('reverse', size=8), 1000, 64, 3e-3, 0, 'float32')['cpu'])")
    scalar = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert scalar.startswith("DEFAULT") and scalar != key["cpu"]


def test_the_curriculum_grows_the_size_over_the_first_quarter_and_draws_only_that_size():
    task = make_task("reverse", size=40)
    sizes = [sft.curriculum_size(task, step, 1000) for step in range(1000)]
    assert sizes[0] == 2 and sizes[250:] == [40] * 750
    assert all(later >= earlier for earlier, later in zip(sizes, sizes[1:]))
    for step in (0, 100, 250, 499):
        problems = task.train_batch(64, seed=step, size=sizes[step])
        assert max(len(p.answer) for p in problems) <= sizes[step]
    assert max(len(p.answer) for p in task.train_batch(200, seed=0, size=12)) == 12  # the easy part, all of it
    assert task.train_batch(8, seed=3, size=None) == task.train_batch(8, seed=3)
    assert sft.curriculum_size(make_task("reverse", size=2), 0, 10) == 2


def test_label_smoothing_leaves_each_answer_token_near_1_minus_eps():
    """The smoothed cross-entropy is minimal at p(answer token) = 1 - eps + eps / V: a fixed, known place."""
    answer, eps = "4721", 0.1
    task = Task("constant", lambda rng: Problem(f"q{rng.randrange(1000)}", answer), [Problem("q5", answer)])
    model, tokenizer = load_model("tiny-qwen3")
    sft.sft(model, tokenizer, task, steps=150, batch_size=16, lr=3e-3, seed=0, label_smoothing=eps)
    batch = sft.teacher_forced_batch(tokenizer, ["q5"], [answer], "cpu")
    with torch.no_grad():
        _, logp = sft.smoothed_answer_loss(model, batch, eps)
    optimum = 1 - eps + eps / model.config.vocab_size
    assert torch.allclose(logp[batch.completion_mask].exp(), torch.tensor(optimum), atol=0.02)


def last_bar(err: str) -> str:
    return err.replace("\r", "\n").strip().splitlines()[-1]


def test_a_converged_warm_start_reproduces_its_answers_greedily(capsys):
    """`exact` = 1 means every answer token has probability above 1/2: greedy decoding gives the answer."""
    answer = "4721"
    task = Task("constant", lambda rng: Problem(f"q{rng.randrange(1000)}", answer), [Problem("q5", answer)])
    model, tokenizer = load_model("tiny-qwen3")
    report = sft.sft(model, tokenizer, task, steps=60, batch_size=16, lr=3e-3, seed=0)
    assert report["exact"] == 1.0 and report["converged_at"] is not None
    assert report["steps"] == report["converged_at"] + 60 // 4  # converged, then annealed over steps // 4
    assert report["steps"] < 60 + 60 // 4
    # The bar counts to the budget plus annealing; converged early, its total moved down to the end it reached.
    assert f"{report['steps']}/{report['steps']} [" in last_bar(capsys.readouterr().err)
    texts = sample(model, tokenizer, ["q5", "q77"], max_new_tokens=8, greedy=True).texts
    assert texts == [answer, answer]


def test_an_unconverged_warm_start_says_so():
    task = make_task("reverse", size=8)
    model, tokenizer = load_model("tiny-qwen3")
    report = sft.sft(model, tokenizer, task, steps=2, batch_size=8, lr=3e-3, seed=0)
    assert report == {"exact": 0.0, "converged_at": None, "steps": 3}  # 2 steps, then 1 of annealing


def test_converged_annealing_lasts_a_share_of_the_convergence_step(monkeypatch):
    """--sft-anneal converged (converged-half): a model converged at step c anneals c // 4 (c // 2) steps (budget:
    steps // 4 whatever c);
    one that never converges anneals a quarter of the budget either way."""
    monkeypatch.setattr(sft, "CONVERGED_WINDOW", 1)
    monkeypatch.setattr(sft, "CONVERGED_EXACT", 0.0)  # "converged" after the first step at the full size
    task = make_task("reverse", size=8)
    model, tokenizer = load_model("tiny-qwen3")
    budget = sft.sft(model, tokenizer, task, steps=40, batch_size=4, lr=3e-3, seed=0)
    at = 40 // 4 + 1  # the curriculum reaches the full size at step 10; one step there fills the window
    assert budget["converged_at"] == at and budget["steps"] == at + 40 // 4
    converged = sft.sft(model, tokenizer, task, steps=40, batch_size=4, lr=3e-3, seed=0, anneal="converged")
    assert converged["converged_at"] == at and converged["steps"] == at + at // 4
    half = sft.sft(model, tokenizer, task, steps=40, batch_size=4, lr=3e-3, seed=0, anneal="converged-half")
    assert half["converged_at"] == at and half["steps"] == at + at // 2
    monkeypatch.setattr(sft, "CONVERGED_EXACT", 2.0)  # never
    never = sft.sft(model, tokenizer, task, steps=4, batch_size=4, lr=3e-3, seed=0, anneal="converged")
    assert never["converged_at"] is None and never["steps"] == 4 + 1
    with pytest.raises(ValueError, match="anneal: unknown annealing 'soon'"):
        sft.sft(model, tokenizer, task, steps=4, batch_size=4, lr=3e-3, seed=0, anneal="soon")


def test_the_warm_start_bar_has_a_total_and_time_left(capsys):
    task = make_task("reverse", size=8)
    model, tokenizer = load_model("tiny-qwen3")
    sft.sft(model, tokenizer, task, steps=8, batch_size=8, lr=3e-3, seed=0)
    # 8 steps + 2 of annealing; tqdm shows [elapsed<left] once it has a total and a rate.
    assert re.search(r" 10/10 \[[0-9:]+<[0-9:]+,", last_bar(capsys.readouterr().err))


def test_a_smaller_sft_task_size_warms_up_on_short_strings_of_the_same_training_split(monkeypatch):
    """--sft-task-size: the demonstrations stop at that length while RL's task (and held-out) reach beyond."""
    from train import TrainConfig

    seen = {}
    monkeypatch.setattr(sft, "warm_start",
                        lambda name, task, task_key, *args, **kwargs: seen.update(task=task, key=task_key) or (None, None))
    cfg = from_flat(TrainConfig, dict(task="reverse", task_size=40, sft_task_size=12, sft_steps=10))
    rl_task = make_task(cfg.task, cfg.task_size, cfg.eval_problems, cfg.heldout_file, seed=0)
    sft.initial_model(cfg, rl_task, "cpu", None)
    demos = seen["task"].train_batch(500, seed=0, size=None)
    assert max(len(p.answer) for p in demos) == 12 < max(len(p.answer) for p in rl_task.heldout_problems)
    assert not {p.prompt for p in demos} & {p.prompt for p in rl_task.heldout_problems}
    assert seen["key"]["task_size"] == 12 and seen["task"].fingerprint() != rl_task.fingerprint()
    with pytest.raises(ValueError, match="sft_task_size"):
        from_flat(TrainConfig, dict(task="data.jsonl", sft_task_size=12))


def test_the_warm_start_is_cached_where_docs_training_says_and_deleting_it_trains_afresh(capsys, monkeypatch):
    import shutil
    from pathlib import Path

    from nano_respo.models import cache_dir

    docs = " ".join((Path(__file__).parents[2] / "docs" / "training.md").read_text().split())
    assert "`$NANO_RESPO_CACHE/sft/` (default `~/.cache/nano_respo/sft/`)" in docs
    with monkeypatch.context() as unset:
        unset.delenv("NANO_RESPO_CACHE")
        assert cache_dir() == Path.home() / ".cache" / "nano_respo"
    args = ("tiny-qwen3", make_task("reverse", size=4), {}, 2, 4, 1e-3, 0, "float32", "cpu")
    sft.warm_start(*args)
    (entry,) = [p for p in (cache_dir() / "sft").iterdir() if p.name.startswith("tiny-qwen3-reverse-")]
    assert (entry / "warm_start.json").is_file() and (entry / "config.json").is_file()
    capsys.readouterr()
    sft.warm_start(*args)
    assert f"warm start: cached {entry}" in capsys.readouterr().out
    shutil.rmtree(entry)
    sft.warm_start(*args)
    out = capsys.readouterr().out
    assert "cached" not in out and "warm start: not converged within 2 steps" in out and entry.is_dir()

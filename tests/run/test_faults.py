"""Faults a careful user meets: concurrent runs, edited data, damaged checkpoints, full disks, bad input.

Each test states one failure mode and what must happen instead: a one-line error naming the
argument, file or line; a fallback that names what it skipped; never a silent wrong result.
"""

import errno
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)

import train as train_module  # noqa: E402
from nano_respo import checkpoint as checkpoint_module  # noqa: E402
from nano_respo import models, runs, sft, tasks  # noqa: E402
from nano_respo.runs import run_lock  # noqa: E402
from nano_respo.tasks import Problem, make_task  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


# Tiny models and warm starts go to a private cache per module (tests/conftest.py), never the user's.
pytestmark = pytest.mark.usefixtures("model_cache")


def write_jsonl(path: Path, rows) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def numbered_rows(n: int, start: int = 0) -> list[dict]:
    return [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(start, start + n)]


# ---- one process per run directory ----------------------------------------------------------------

HOLDER = """
import sys
from pathlib import Path
from nano_respo.runs import run_lock
try:
    with run_lock(Path(sys.argv[1])):
        print("locked", flush=True)
        sys.stdin.read()  # hold the lock until the parent closes stdin
except ValueError as error:
    print(error, flush=True)
    sys.exit(1)
"""


def start_holder(run_dir: Path) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir)], cwd=REPO, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert holder.stdout.readline().strip() == "locked"
    return holder


def test_a_second_run_on_the_same_directory_is_refused_naming_it(tmp_path):
    run_dir = tmp_path / "run"
    holder = start_holder(run_dir)
    try:
        with pytest.raises(ValueError, match=f"^run lock: {run_dir} is in use by another run; wait for it or pass "
                                             f"another --name$"):
            with run_lock(run_dir):
                pass
        second = subprocess.run([sys.executable, "-c", HOLDER, str(run_dir)], cwd=REPO, text=True,
                                stdin=subprocess.DEVNULL, capture_output=True)
        assert second.returncode == 1 and f"{run_dir} is in use by another run" in second.stdout
        assert len(second.stdout.strip().splitlines()) == 1
    finally:
        holder.stdin.close()
        holder.wait()
    with run_lock(run_dir):  # released when its holder exits
        pass


def test_the_lock_of_a_killed_run_is_free_at_once(tmp_path):
    """kill -9 runs no clean-up: the kernel releases an flock with its holder's last descriptor, so nothing stale
    is left to take over."""
    run_dir = tmp_path / "run"
    holder = start_holder(run_dir)
    holder.kill()
    holder.wait()
    assert (run_dir / "run.lock").exists()  # the file stays; the lock does not
    with run_lock(run_dir):
        pass


def test_the_lock_is_released_when_the_run_raises(tmp_path):
    with pytest.raises(RuntimeError):
        with run_lock(tmp_path):
            raise RuntimeError("out of memory")
    with run_lock(tmp_path):
        pass


# ---- the warm-start cache follows the data, not its path ------------------------------------------

def test_the_warm_start_key_changes_with_an_answer_and_not_with_the_path(tmp_path):
    rows = numbered_rows(100)
    settings = dict(steps=5, batch_size=4, lr=1e-3, seed=0, dtype="float32")
    original = make_task(write_jsonl(tmp_path / "data.jsonl", rows), heldout_file=None)
    moved_dir = tmp_path / "moved"
    moved_dir.mkdir()
    moved = make_task(write_jsonl(moved_dir / "data.jsonl", rows))
    rows[3]["answer"] = "wrong"
    edited = make_task(write_jsonl(tmp_path / "data.jsonl", rows))
    key = sft.warm_start_key("tiny-qwen3", original, **settings)
    assert sft.warm_start_key("tiny-qwen3", moved, **settings) == key
    assert sft.warm_start_key("tiny-qwen3", edited, **settings) != key
    assert sft.warm_start_key("tiny-qwen3", make_task("addition", 3), **settings) != \
        sft.warm_start_key("tiny-qwen3", make_task("addition", 4), **settings)


def test_a_warm_start_on_edited_data_is_trained_again_not_taken_from_the_cache(tmp_path, capsys):
    data = tmp_path / "data.jsonl"
    rows = [{"prompt": f"reverse {i:04d}", "answer": f"{i:04d}"[::-1]} for i in range(100)]

    def warm(task_rows):
        task = make_task(write_jsonl(data, task_rows))
        model, _ = sft.warm_start("tiny-qwen3", task, {"task": str(data)}, steps=1, batch_size=4, lr=1e-3,
                                  seed=0, dtype="float32", device="cpu")
        return "warm start: cached" in capsys.readouterr().out, next(model.parameters()).detach().clone()

    assert warm(rows)[0] is False
    rows[5]["answer"] = "9999"
    cached, _ = warm(rows)
    assert cached is False  # the same path with other content is other data
    assert warm(rows)[0] is True


# ---- checkpoints check themselves -----------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = models.load_model("tiny-qwen3")
    return model, tokenizer, torch.optim.AdamW(model.parameters())


def save(run_dir: Path, tiny, iteration: int, keep: int = 2) -> Path:
    model, tokenizer, optimizer = tiny
    return checkpoint_module.save_checkpoint(run_dir, model, tokenizer, iteration=iteration, step=2 * iteration,
                                             config={"seed": 0}, optimizer_state=optimizer.state_dict(), keep=keep)


@pytest.mark.parametrize("missing", ["chat_template.jinja", "tokenizer_config.json", "trainer_state.pt"])
def test_a_checkpoint_without_a_file_loading_needs_is_refused_naming_it(tmp_path, tiny, missing):
    checkpoint = save(tmp_path, tiny, 1)
    (checkpoint / missing).unlink()
    with pytest.raises(ValueError, match=f"iter-000001 cannot be loaded: {missing} is missing"):
        models.load_model(str(checkpoint))  # not silently with another prompt format or tokenizer
    with pytest.raises(ValueError, match=f"iter-000001 cannot be loaded: {missing} is missing"):
        checkpoint_module.verify_checkpoint(checkpoint)


def test_a_truncated_latest_checkpoint_falls_back_to_the_previous_one_naming_it(tmp_path, tiny, capsys):
    save(tmp_path, tiny, 1)
    latest = save(tmp_path, tiny, 2)
    weights = latest / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-112])  # a copy or a save cut short
    model, _ = models.load_model(str(tmp_path))  # a run directory as --model
    assert "skipped iter-000002" in capsys.readouterr().out
    assert sum(p.numel() for p in model.parameters()) > 100_000
    checkpoint, skipped = checkpoint_module.newest_intact_checkpoint(tmp_path)  # what --resume takes
    assert checkpoint.name == "iter-000001"
    assert len(skipped) == 1 and "iter-000002: model.safetensors is" in skipped[0]


@pytest.mark.parametrize("damage", ["truncated weights", "tokenizer_config.json", "trainer_state.pt"])
def test_eval_py_refuses_a_run_whose_newest_checkpoint_is_damaged_unless_asked_for_the_newest_readable(tmp_path,
                                                                                                       tiny, damage):
    from eval import EvalConfig, run_eval

    save(tmp_path, tiny, 1)
    newest = save(tmp_path, tiny, 2)
    weights = newest / "model.safetensors"
    if damage == "truncated weights":
        weights.write_bytes(weights.read_bytes()[:-112])
        problem = f"model.safetensors is {weights.stat().st_size} bytes, {weights.stat().st_size + 112} were written"
    else:  # a file the checkpoint needs, missing (a copy that left one behind)
        (newest / damage).unlink()
        problem = f"{damage} is missing"
    done = subprocess.run([sys.executable, str(REPO / "eval.py"), "--model", str(tmp_path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"error: model: the newest checkpoint of {str(tmp_path)!r}, iter-000002, cannot be read "
                           f"({problem}); --newest-readable evaluates the newest readable one instead\n")
    result = run_eval(EvalConfig(model=str(tmp_path), newest_readable=True, eval_problems=2, samples=1,
                                 max_new_tokens=2))
    assert result["checkpoint"] == str(tmp_path / "checkpoints" / "iter-000001")


def test_a_damaged_weights_file_is_named_even_without_a_manifest(tmp_path, tiny):
    checkpoint = save(tmp_path, tiny, 1)
    (checkpoint / checkpoint_module.MANIFEST_FILE).unlink()  # as written before manifests existed
    weights = checkpoint / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-112])
    with pytest.raises(ValueError, match="model.safetensors is damaged \\(.*file not fully covered"):
        checkpoint_module.verify_checkpoint(checkpoint)


def test_a_deleted_latest_checkpoint_falls_back_and_none_left_says_so(tmp_path, tiny):
    save(tmp_path, tiny, 1)
    shutil.rmtree(save(tmp_path, tiny, 2))
    checkpoint, skipped = checkpoint_module.newest_intact_checkpoint(tmp_path)
    assert checkpoint.name == "iter-000001" and skipped == ["skipped iter-000002: the directory is missing"]
    shutil.rmtree(checkpoint)
    assert checkpoint_module.newest_intact_checkpoint(tmp_path)[0] is None
    with pytest.raises(ValueError, match="is a run directory without an intact checkpoint yet"):
        models.load_model(str(tmp_path))


def test_a_save_over_a_damaged_checkpoint_of_the_same_iteration_replaces_it(tmp_path, tiny):
    checkpoint = save(tmp_path, tiny, 1)
    (checkpoint / "chat_template.jinja").unlink()
    save(tmp_path, tiny, 1)  # a resume that fell back reaches this iteration again
    assert (checkpoint / "chat_template.jinja").is_file()


def test_unfinished_saves_are_removed(tmp_path, tiny):
    save(tmp_path, tiny, 1)
    leftover = tmp_path / "checkpoints" / ".tmp-iter-000002-12345"
    shutil.copytree(tmp_path / "checkpoints" / "iter-000001", leftover)  # a kill during a save
    assert checkpoint_module.remove_temporary_checkpoints(tmp_path) == [leftover]
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["iter-000001"]


def test_a_save_on_a_full_disk_says_so_in_one_line_and_keeps_latest(tmp_path, tiny, monkeypatch):
    save(tmp_path, tiny, 1)

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(checkpoint_module.torch, "save", full_disk)
    with pytest.raises(ValueError) as error:  # train.py prints a ValueError as one line
        save(tmp_path, tiny, 2)
    message = str(error.value)
    assert "\n" not in message and "disk is full" in message and "iter-000002" in message
    assert "latest` still names checkpoints/iter-000001" in message
    assert checkpoint_module.newest_intact_checkpoint(tmp_path) == (tmp_path / "checkpoints/iter-000001", [])
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["iter-000001"]


def test_a_checkpoint_records_its_dtype_and_retention_is_a_parameter(tmp_path, tiny):
    model, tokenizer, optimizer = tiny
    half = models.load_model("tiny-qwen3", dtype="bfloat16")[0]
    checkpoint = checkpoint_module.save_checkpoint(tmp_path / "half", half, tokenizer, 1, 1, {},
                                                   optimizer.state_dict())
    assert checkpoint_module.checkpoint_dtype(checkpoint) == "bfloat16"
    for iteration in (1, 2, 3, 4):
        save(tmp_path / "three", tiny, iteration, keep=3)
    assert sorted(p.name for p in (tmp_path / "three" / "checkpoints").iterdir()) == \
        ["iter-000002", "iter-000003", "iter-000004"]
    with pytest.raises(ValueError, match="keep_checkpoints: must be >= 1, got 0"):
        save(tmp_path / "none", tiny, 1, keep=0)


# ---- metrics.jsonl after a kill or a full disk ----------------------------------------------------

def test_a_cut_off_last_metrics_line_is_dropped_and_repaired_on_resume(tmp_path):
    records = [{"kind": "train", "iteration": i, "step": i + 1, "reward": 0.5} for i in range(3)]
    text = "".join(json.dumps(r) + "\n" for r in records)
    (tmp_path / "metrics.jsonl").write_text(text + json.dumps(records[0])[:20])
    assert runs.read_metrics(tmp_path) == records
    log = runs.MetricsLog(tmp_path, keep_until_iteration=3)  # what --resume does
    log.close()
    assert (tmp_path / "metrics.jsonl").read_text() == text
    assert runs.read_metrics(tmp_path) == records


def test_resume_keeps_the_records_its_checkpoint_had_seen_and_drops_the_rest(tmp_path):
    """A run killed after checkpoint 2 logged iteration 2 (and maybe half of 3): --resume from 2 keeps iterations
    0 and 1 and the evaluation at 2, drops the rest, so the resumed run writes each record once."""
    records = [{"kind": "eval", "iteration": 0, "step": 0}]
    for i in range(3):
        records += [{"kind": "train", "iteration": i, "step": i + 1}, {"kind": "time", "iteration": i, "step": i + 1}]
        records.append({"kind": "eval", "iteration": i + 1, "step": i + 1})
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    log = runs.MetricsLog(tmp_path, keep_until_iteration=2)
    kept = [r for r in records if r["iteration"] < 2 or (r["kind"] == "eval" and r["iteration"] == 2)]
    assert log.records == kept and log.last_eval() == {"kind": "eval", "iteration": 2, "step": 2}
    log.write({"kind": "train", "iteration": 2, "step": 3})
    log.close()
    assert runs.read_metrics(tmp_path) == kept + [{"kind": "train", "iteration": 2, "step": 3}]


def test_a_broken_metrics_line_before_the_last_names_file_and_line(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"kind": "train"}\n{"kind": "tr\n{"kind": "train"}\n')
    with pytest.raises(ValueError, match="metrics.jsonl:2 is not a JSON record"):
        runs.read_metrics(tmp_path)


# ---- data checked as it loads ---------------------------------------------------------------------

@pytest.mark.parametrize("row, message", [
    ({"prompt": "1+1=", "answer": None}, "'answer' must be a non-empty string or a number, got null"),
    ({"prompt": None, "answer": "2"}, "'prompt' must be a non-empty string, got null"),
    ({"prompt": "1+1=", "answer": True}, "'answer' must be"),
    ({"prompt": "1+1=", "answer": ["2"]}, "'answer' must be"),
    ({"prompt": "x" * 2**20, "answer": "1"}, "the prompt is 1,048,576 characters, over the limit"),
])
def test_bad_jsonl_rows_are_refused_naming_file_and_line(tmp_path, row, message):
    path = write_jsonl(tmp_path / "data.jsonl", numbered_rows(5) + [row])
    with pytest.raises(ValueError, match=f"data.jsonl:6: {message}"):
        tasks.read_jsonl(path)


def test_numeric_answers_are_kept_exactly(tmp_path):
    path = write_jsonl(tmp_path / "data.jsonl", [{"prompt": "1+1=", "answer": 2}, {"prompt": "x", "answer": 2.5}])
    assert tasks.read_jsonl(path) == [Problem("1+1=", "2"), Problem("x", "2.5")]


def test_a_byte_order_mark_is_accepted_and_other_bytes_name_file_and_line(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + '{"prompt": "caf\u00e9", "answer": "1"}\n'.encode())
    assert tasks.read_jsonl(str(path)) == [Problem("caf\u00e9", "1")]
    path.write_bytes(b'{"prompt": "a", "answer": "1"}\n{"prompt": "b", "answer": "2"}\n{"prompt": "caf\xe9"}\n')
    with pytest.raises(ValueError, match="data.jsonl:3 is not UTF-8 text"):
        tasks.read_jsonl(str(path))


def test_duplicates_are_reported(tmp_path, capsys):
    rows = numbered_rows(5) + [{"prompt": "0+1=", "answer": "1"}, {"prompt": "1+1=", "answer": "3"}]
    tasks.read_jsonl(write_jsonl(tmp_path / "data.jsonl", rows))
    assert "repeats 2 prompt(s) (1 with a different answer)" in capsys.readouterr().out


def test_a_heldout_file_overlapping_the_training_file_is_refused(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", numbered_rows(50))
    heldout = write_jsonl(tmp_path / "heldout.jsonl", numbered_rows(10, start=45))
    with pytest.raises(ValueError, match="heldout_file: 5 prompt\\(s\\) of .*heldout.jsonl are also in .*train.jsonl"):
        make_task(train, heldout_file=heldout)
    disjoint = write_jsonl(tmp_path / "disjoint.jsonl", numbered_rows(10, start=50))
    assert len(make_task(train, heldout_file=disjoint).heldout_problems) == 10


def test_heldout_file_arguments_fail_with_one_line_naming_the_argument(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", numbered_rows(50))
    with pytest.raises(ValueError, match="heldout_file: no such file"):
        make_task(train, heldout_file=str(tmp_path / "missing.jsonl"))
    with pytest.raises(ValueError, match="heldout_file: .* is a directory"):
        make_task(train, heldout_file=str(tmp_path))
    with pytest.raises(ValueError, match="heldout_file: only .jsonl tasks take a held-out file; reverse"):
        make_task("reverse", heldout_file=train)


def test_task_size_zero_is_refused_and_the_smallest_sizes_work():
    with pytest.raises(ValueError, match="task_size: addition needs a size >= 1, got 0"):
        make_task("addition", size=0)
    with pytest.raises(ValueError, match="task_size: reverse needs a size >= 2, got 1"):
        make_task("reverse", size=1)
    for name, size in (("addition", 1), ("reverse", 2)):
        task = make_task(name, size=size)
        assert task.heldout_problems and len(task.train_batch(20, seed=0)) == 20


# ---- the character tokenizer ----------------------------------------------------------------------

def test_the_character_tokenizer_refuses_unknown_characters_instead_of_dropping_them(tmp_path):
    from transformers import AutoTokenizer

    models.build_char_tokenizer().save_pretrained(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)  # the path every model and checkpoint takes
    text = "reverse 0123 Ab,!\n"
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text
    with pytest.raises(Exception, match="does not know"):
        tokenizer("caf\u00e9 \u2014 \u4e2d 5+5=")
    assert models.unknown_characters(tokenizer, "caf\u00e9 \u2014 \u4e2d 5+5=") == ["\u00e9", "\u2014", "\u4e2d"]
    problems = [Problem("1+1=", "2"), Problem("caf\u00e9 5+5=", "10")]
    with pytest.raises(ValueError, match="task: 'caf\u00e9 5\\+5=' holds characters .* does not know: '\u00e9'"):
        models.refuse_unknown_characters(tokenizer, problems)
    models.refuse_unknown_characters(tokenizer, make_task("reverse").heldout_problems)


# ---- run arguments checked before anything loads ---------------------------------------------------

def run_args(**overrides):
    return train_module.TrainConfig(**{"model": "tiny-qwen3", **overrides})  # every check runs as the config is built


@pytest.mark.parametrize("overrides, message", [
    (dict(lr=-0.1), "lr: must be > 0, got -0.1"),
    (dict(lr=float("nan")), "lr: must be > 0, got nan"),
    (dict(weight_decay=-1.0), "weight_decay: must be >= 0, got -1.0"),
    (dict(group_size=1), "group_size: must be >= 2, got 1; a group of one learns nothing"),
    (dict(device="gpu"), "device: unknown device 'gpu'; choose auto, cpu, cuda or cuda:N"),
    (dict(keep_checkpoints=0), "keep_checkpoints: must be >= 1, got 0"),
    (dict(max_grad_norm=float("inf")), "max_grad_norm: must be > 0, got inf"),
])
def test_bad_run_arguments_fail_with_one_line_naming_them(overrides, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        run_args(**overrides)


def test_a_run_directory_without_checkpoints_as_model_fails_in_one_line(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps({"model": "tiny-qwen3"}))  # what a run writes first
    (run_dir / "metrics.jsonl").write_text("")
    with pytest.raises(ValueError, match="is a run directory without an intact checkpoint yet"):
        models.resolve_model_path(str(run_dir))
    with pytest.raises(ValueError, match="model: .*run' is a run directory without an intact checkpoint yet"):
        run_args(model=str(run_dir))
    run_args(device="cuda:1")  # a valid name: whether CUDA exists is asked only when the run starts


# ---- the trainer's start-up: refusals before anything loads, one run per directory, SIGTERM ----

def test_a_second_run_on_a_locked_run_directory_is_refused_before_loading(tmp_path, monkeypatch):
    def loading(*args, **kwargs):
        raise AssertionError("the second run loaded a model")
    monkeypatch.setattr(train_module, "initial_model", loading)
    cfg = train_module.TrainConfig(out_dir=str(tmp_path), name="shared")
    with run_lock(tmp_path / "shared"):
        with pytest.raises(ValueError, match="in use by another run"):
            train_module.train(cfg)


# ---- eval.py on a run directory: the run's dtype, its task's settings only for its task ----------

def short_run(tmp_path, monkeypatch, **overrides):
    """A 2-iteration tiny run whose reward varies on a random-init model (training and eval.py alike)."""
    import eval  # noqa: A004 (eval.py, the module)
    from nano_respo.cli import from_flat

    def parity_task(*args, **kwargs):
        task = make_task(*args, **kwargs)
        task.reward = lambda text, answer: float(sum(map(ord, text)) % 2)
        return task
    monkeypatch.setattr(train_module, "make_task", parity_task)
    monkeypatch.setattr(eval, "make_task", parity_task)
    settings = dict(model="tiny-qwen3", task="addition", sft_steps=0, iterations=2, prompts_per_iteration=4,
                    group_size=4, reuse=2, epochs=1, max_new_tokens=6, eval_problems=16, eval_samples=2,
                    out_dir=str(tmp_path), plots=False, name="run")
    return train_module.train(from_flat(train_module.TrainConfig, {**settings, **overrides}))


def test_eval_py_evaluates_a_bfloat16_run_in_bfloat16_and_reproduces_its_figures(tmp_path, monkeypatch):
    from eval import EvalConfig, run_eval

    run_dir = short_run(tmp_path, monkeypatch, dtype="bfloat16")
    logged = [r for r in runs.read_metrics(run_dir) if r["kind"] == "eval"][-1]
    result = run_eval(EvalConfig(model=str(run_dir)))
    assert result["dtype"] == "bfloat16"
    assert {k: result[k] for k in ("heldout_acc", "heldout_pass@1", "heldout_pass@2")} == \
        {k: logged[k] for k in ("heldout_acc", "heldout_pass@1", "heldout_pass@2")}
    assert run_eval(EvalConfig(model=str(run_dir), dtype="float32"))["dtype"] == "float32"


def test_eval_py_takes_a_runs_heldout_file_only_for_the_runs_own_task(tmp_path, monkeypatch):
    from eval import EvalConfig, run_eval

    train_file = write_jsonl(tmp_path / "train.jsonl", numbered_rows(60))
    heldout = write_jsonl(tmp_path / "heldout.jsonl", numbered_rows(8, start=100))
    run_dir = short_run(tmp_path, monkeypatch, task=train_file, heldout_file=heldout, eval_problems=8)
    assert run_eval(EvalConfig(model=str(run_dir)))["problems"] == 8  # its own task: its held-out file
    assert run_eval(EvalConfig(model=str(run_dir), task="reverse", eval_problems=4))["task"] == "reverse"
    with pytest.raises(ValueError, match="heldout_file: only .jsonl tasks take a held-out file; reverse"):
        run_eval(EvalConfig(model=str(run_dir), task="reverse", heldout_file=heldout))


def test_training_data_the_tokenizer_cannot_encode_is_refused_before_the_run_starts(tmp_path, monkeypatch):
    rows = numbered_rows(60) + [{"prompt": "caf\u00e9 5+5=", "answer": "10"}]  # drawn rarely: refused up front
    for sft_steps in (0, 2):  # before the warm start too
        task = write_jsonl(tmp_path / "data.jsonl", rows)
        with pytest.raises(ValueError, match="'caf\u00e9 5\\+5=' holds characters .* does not know: '\u00e9'"):
            short_run(tmp_path, monkeypatch, task=task, sft_steps=sft_steps, name=f"sft{sft_steps}")
        assert not (tmp_path / f"sft{sft_steps}" / "metrics.jsonl").exists()

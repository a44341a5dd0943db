"""research/rerun.py on made-up records: where a command runs and writes, and what a rerun is compared on."""

import gzip
import json
import sys
from pathlib import Path

import pytest

from research import rerun


def test_every_recorded_value_but_timing_and_where_it_ran_is_compared():
    committed = {"command": "python experiments/gate1.py --out experiments/results/gate1/a.json", "seconds": 247,
                 "finished": "2026-12-01T10:19:40", "warm_start": {"steps": 1250, "seconds": 241, "cpu": "Intel"},
                 "config": {"out": "experiments/results/gate1/a.json", "methods": ["seq_clip"]},
                 "figure": "experiments/figures/g.png",
                 "reward_curve": [0.25, float("nan"), 0.5], "printed": ["run: /tmp/tmp3w9ndzah/reverse-seed0"]}
    again = {"command": "python -m research.gate1 --out /tmp/x/a.json", "seconds": 300, "finished": "later",
             "warm_start": {"steps": 1250, "seconds": 199, "cpu": "AMD EPYC"}, "extra": 1,
             "config": {"out": "/tmp/x/a.json"}, "figure": "research/figures/g.png",
             "reward_curve": [0.25, float("nan"), 0.5], "printed": ["run: /tmp/tmpm7djmj3x/reverse-seed0"]}
    assert rerun.differences(committed, again) == []
    again["reward_curve"][2] = 0.5000000000000001
    again["warm_start"]["steps"] = 1251
    assert rerun.differences(committed, again) == ["warm_start.steps: 1250 != 1251",
                                                   "reward_curve.2: 0.5 != 0.5000000000000001"]
    del again["warm_start"]
    (missing, _) = rerun.differences(committed, again)
    assert missing.startswith("warm_start: ") and missing.endswith("(missing in the rerun)")
    assert rerun.differences({"a": [1, 2]}, {"a": [1]}) == ["a: 2 entries != 1"]


def test_a_command_runs_in_the_worktree_with_its_cpu_variables_a_new_cache_and_a_scratch_output(tmp_path, monkeypatch):
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx512")
    monkeypatch.setenv("NANO_RESPO_CACHE", "/somewhere")
    tree = Path("/tmp/nano-respo-0000000")
    env, argv = rerun.prepare("ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 NANO_RESPO_CACHE=<empty dir> "
                              "python experiments/gate1.py --sft-task-size 27 --out experiments/results/g/novec.json",
                              tree, tmp_path)
    assert (env["ATEN_CPU_CAPABILITY"], env["MKL_ENABLE_INSTRUCTIONS"]) == ("default", "SSE4_2")
    assert env["NANO_RESPO_CACHE"] == str(tmp_path / "cache") and env["PYTHONPATH"] == str(tree)
    assert env["OMP_NUM_THREADS"] == "1"
    assert argv == [sys.executable, "-m", "research.gate1", "--sft-task-size", "27", "--out",
                    str(tmp_path / "out" / "novec.json")]
    env, argv = rerun.prepare("python -m research.reuse --stage evaluate --out runs/reuse-rerun", tree, tmp_path)
    assert "ATEN_CPU_CAPABILITY" not in env and argv[-2:] == ["--out", str(tmp_path / "out")]
    env, argv = rerun.prepare("python experiments/gate2.py --out-dir /tmp/g1/x --out experiments/results/g2.json",
                              tree, tmp_path)
    assert argv[3:] == ["--out-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "out" / "g2.json")]
    _, argv = rerun.prepare("python experiments/conflict.py --stage gate1", tree, tmp_path)
    assert argv[1:3] == ["-m", "research.conflict"] and argv[-2:] == ["--out", str(tmp_path / "out")]
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments/conflict.py").touch()  # a commit before 827d766 still has it there
    _, argv = rerun.prepare("python experiments/conflict.py --stage gate1", tmp_path, tmp_path)
    assert argv[1] == "experiments/conflict.py"


def test_records_without_a_command_get_their_documented_one():
    off = {"model": "tiny-qwen3", "source": "reuse", "arm": "respo_wtilt", "seed": 0, "setting": "scalar"}
    assert rerun.command_of(off) == ("ATEN_CPU_CAPABILITY=default python -m research.offpolicy --models tiny-qwen3 "
                                     "--sources reuse --arms respo_wtilt --seeds 0")
    toy = {"env": "seq", "method": "respo_wtilt", "reuse": 4, "seed": 200, "lr": 0.01, "iterations": 60,
           "prompts_per_batch": 16, "group_size": 8, "minibatches": 4, "hidden": 32, "max_grad_norm": 1.0,
           "adv_scale": "none", "heldout_samples": 64, "loss": {"wtilt_alpha_pos": 0.0}, "key": "k",
           "cpu_capability": "AVX2"}
    command = rerun.command_of(toy)
    assert command.startswith("ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 python -m research.toy.run "
                              "--env seq --methods respo_wtilt --reuse 4 --seeds 200 --lrs respo_wtilt=0.01 ")
    assert "--wtilt-alpha-pos 0.0" in command and "--prompts-per-batch 16" in command
    with pytest.raises(SystemExit):
        rerun.command_of({"model": "tiny-qwen3"})


def test_a_record_is_a_file_or_a_line_and_its_rerun_the_output_that_ends_most_like_it(tmp_path):
    (tmp_path / "r.json").write_text(json.dumps({"command": "python x.py"}))
    with gzip.open(tmp_path / "runs.jsonl.gz", "wt") as f:
        f.write(json.dumps({"key": "a"}) + "\n" + json.dumps({"key": "b"}) + "\n")
    assert rerun.load(str(tmp_path / "r.json"))[1:] == (None, {"command": "python x.py"})
    assert rerun.load(f"{tmp_path / 'runs.jsonl.gz'}:2")[1:] == (2, {"key": "b"})
    out = tmp_path / "out"
    for name in ("unvectorised/evaluate/grpo-seed0.json", "default/evaluate/grpo-seed0.json", "unvectorised/lr/x.json"):
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text("{}")
    committed = Path("/repo/research/results/reuse-rerun/unvectorised/evaluate/grpo-seed0.json")
    assert rerun.counterpart(committed, out) == out / "unvectorised/evaluate/grpo-seed0.json"
    assert rerun.counterpart(Path("/repo/other.json"), out) is None
    (out / "toy").mkdir()
    (out / "toy/runs.jsonl").write_text("{}")
    assert rerun.counterpart(Path("/repo/research/toy/results/x/runs.jsonl.gz"), out) == out / "toy/runs.jsonl"


def test_one_place_names_the_commit_and_the_readme_points_at_it():
    readme = (Path(rerun.__file__).parent / "README.md").read_text()
    assert f"`{rerun.COMMIT}`" in readme and "`research.rerun`" in readme and "(rerun-9561567.md)" in readme

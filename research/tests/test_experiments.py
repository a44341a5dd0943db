"""research/run.py: the grid it launches and the train.py command of each cell."""

import json
from pathlib import Path

import pytest

from research.cli import parse_config
from train import TrainConfig

from research import across, common, gate2, select_lr as select, warm_start_stop
from research import run as experiments


def config(*argv):
    return parse_config(common.ExperimentConfig, ["--models", "tiny-qwen3", *argv])


def test_the_on_policy_cell_runs_once_and_every_stale_or_reused_cell_for_every_method():
    cfg = config("--methods", "respo", "grpo", "--settings", "1", "1+lag2", "4", "4+lag2", "--seeds", "0")
    cells = set(common.grid(cfg))
    assert ("tiny-qwen3", "respo", 1, 0, 0) in cells and ("tiny-qwen3", "grpo", 1, 0, 0) not in cells
    assert {("tiny-qwen3", m, r, lag, 0) for m in ("respo", "grpo") for r, lag in ((1, 2), (4, 0), (4, 2))} <= cells
    assert len(cells) == 7


def test_each_cell_is_a_valid_train_py_command_with_its_lag_and_learning_rate():
    cfg = config("--methods", "respo", "seq_clip", "--settings", "8+lag2", "--lrs", "respo=0.001")
    for method, lr in (("respo", 0.001), ("seq_clip", TrainConfig().lr)):
        command = common.train_command(cfg, "tiny-qwen3", method, 8, 2, 3, resume=False)
        run = parse_config(TrainConfig, command[len(common.TRAIN_ENTRY):])
        assert (run.loss.method, run.reuse, run.lag, run.lr, run.seed) == (method, 8, 2, lr, 3)
        assert run.name == f"{method}-reuse8-lag2-seed3"
        # The defaults the committed grids ran with, pinned: not today's token-mean and one epoch.
        assert (run.loss.agg, run.epochs) == ("seq-mean-token-sum-norm", 2) != (TrainConfig().loss.agg, TrainConfig().epochs)


def test_the_grids_default_reference_is_the_reconstruction_their_records_ran():
    assert common.ExperimentConfig().methods[0] == select.SelectConfig().methods[0] == "respo_wtilt"
    assert across.AcrossConfig.__dataclass_fields__["reference"].default == "respo_wtilt"


@pytest.mark.parametrize("text", ["0", "4+lag", "lag2", "4 + lag2", "-1"])
def test_a_malformed_setting_is_refused_naming_the_flag(text):
    with pytest.raises(ValueError, match="^settings:"):
        common.ExperimentConfig(settings=[text])


def test_records_of_one_model_replace_that_models_records_and_keep_the_others(tmp_path):
    path = tmp_path / "results" / "records.json"
    experiments.write_records(path, ["tiny-qwen3"], [{"model": "tiny-qwen3", "seed": 0}])
    experiments.write_records(path, ["tiny-qwen3-moe"], [{"model": "tiny-qwen3-moe", "seed": 0}])
    experiments.write_records(path, ["tiny-qwen3"], [{"model": "tiny-qwen3", "seed": 1}])
    assert sorted((r["model"], r["seed"]) for r in json.loads(path.read_text())) == [("tiny-qwen3", 1), ("tiny-qwen3-moe", 0)]


def test_learning_rates_must_name_a_method_of_the_grid():
    with pytest.raises(ValueError, match="^lrs:"):
        common.ExperimentConfig(methods=["respo"], lrs=["grpo=0.01"])




def test_selection_runs_every_method_at_each_learning_rate_and_picks_the_best_score():
    cfg = select.SelectConfig(methods=["respo", "seq_clip"], lr_grid=[1e-4, 1e-3], settings=["8"], seeds=[900])
    command = common.train_command(select.grid_at(cfg, 1e-3), "tiny-qwen3", "seq_clip", 8, 0, 900, resume=False)
    assert parse_config(TrainConfig, command[len(common.TRAIN_ENTRY):]).lr == 1e-3
    outcome = {("respo", 1e-4): 0.2, ("respo", 1e-3): 0.6, ("seq_clip", 1e-4): 0.5, ("seq_clip", 1e-3): 0.1}
    records = [{"method": m, "lr": lr, "early_auc": v, "final_reward": v, "heldout_reward": v}
               for (m, lr), v in outcome.items()]
    best, table = select.choose(records, cfg.methods, cfg.lr_grid)
    assert best == {"respo": 1e-3, "seq_clip": 1e-4}
    assert "| respo | 0.200" in table


def test_the_preregistered_lr_rule_skips_collapsed_learning_rates_and_breaks_near_ties_to_the_smaller():
    def run(lr, start, end, seed, skipped=0):
        return {"method": "respo", "lr": lr, "seed": seed, "reward_curve": [start] * 25 + [end] * 5,
                "skipped_steps": skipped}

    records = [run(1e-4, 0.4, 0.50, 900), run(1e-4, 0.4, 0.52, 901),  # final 0.51
               run(3e-4, 0.4, 0.515, 900), run(3e-4, 0.4, 0.515, 901),  # 0.515: within 0.01 of the best
               run(1e-3, 0.4, 0.90, 900), run(1e-3, 0.4, 0.15, 901)]  # best mean, but one run collapsed
    best, table = select.choose_final(records, ["respo"], [1e-4, 3e-4, 1e-3])
    assert best == {"respo": 1e-4} and "0.525 (1 of 2)" in table
    records[1]["skipped_steps"] = 1  # a skipped step is a collapse too
    assert select.choose_final(records, ["respo"], [1e-4, 3e-4, 1e-3])[0] == {"respo": 3e-4}
    selection = select.SelectConfig(task="digit_sum", sft_task_size=20, sft_full_share=0.02)
    command = common.train_command(select.grid_at(selection, 1e-3), "tiny-qwen3", "respo", 1, 0, 900, resume=False)
    run_cfg = parse_config(TrainConfig, command[len(common.TRAIN_ENTRY):])
    assert (run_cfg.task, run_cfg.sft.task_size, run_cfg.sft.full_share, run_cfg.task_size) == ("digit_sum", 20, 0.02,
                                                                                                   None)
    gate2_cfg = parse_config(TrainConfig, common.train_command(
        gate2.experiment(gate2.Gate2Config(lr=1e-4, sft_task_size=20, sft_full_share=0.02)), "tiny-qwen3", "seq_clip",
        8, 0, 900, resume=False)[len(common.TRAIN_ENTRY):])
    assert (gate2_cfg.sft.task_size, gate2_cfg.sft.full_share, gate2_cfg.reuse) == (20, 0.02, 8)
    with pytest.raises(ValueError, match="^rule:"):
        select.SelectConfig(rule="best")


def test_a_rerun_is_checked_against_committed_records_model_by_model(tmp_path):
    committed = Path(__file__).parents[2] / "research" / "results" / "default" / "records.json"
    reference = json.loads(committed.read_text())
    rerun = tmp_path / "records.json"
    rerun.write_text(json.dumps(reference))  # a rerun that agrees exactly
    argv = ["--models", "tiny-qwen3", "tiny-qwen3-moe", "--out-dir", str(tmp_path), "--records", str(rerun),
            "--check", str(committed)]
    assert experiments.check(parse_config(common.ExperimentConfig, argv))
    assert "CHECK PASSED" in (tmp_path / "check.md").read_text()
    # A claim the records cannot carry fails the check: a method never beats itself.
    failing = parse_config(common.ExperimentConfig, argv + ["--claims", "early_auc@8:grpo:above:grpo"])
    assert not experiments.check(failing)
    assert "CHECK FAILED" in (tmp_path / "check.md").read_text()


def test_a_check_never_writes_into_the_records_it_checks_against(tmp_path):
    committed = str(Path(__file__).parents[2] / "research" / "results" / "default" / "records.json")
    with pytest.raises(ValueError, match="^records:"):
        common.ExperimentConfig(check=committed, records=committed)




def test_a_claim_is_carried_only_when_it_holds_on_every_cpu_setting(tmp_path):
    def records(gap_by_seed):
        return [{"model": "tiny-qwen3", "method": m, "reuse": 8, "lag": 0, "seed": s, "lr": 1e-4,
                 "early_auc": 0.5 + (gap if m == "respo" else 0.0), "full_auc": 0.5, "final_reward": 0.5,
                 "heldout_reward": 0.5} for s, gap in enumerate(gap_by_seed) for m in ("respo", "seq_clip")]

    sets = {"default": records([0.1, 0.12, 0.09, 0.11]), "avx2": records([0.1, -0.05, 0.2, 0.0])}
    table, everywhere = across.claims_on_every_set(["early_auc@8:respo:above:seq_clip"], sets)
    assert not everywhere and "| NO |" in table and "fails" in table
    table, everywhere = across.claims_on_every_set(["early_auc@8:respo:above:seq_clip"], {"default": sets["default"]})
    assert everywhere
    for label, data in sets.items():
        (tmp_path / f"{label}.json").write_text(json.dumps(data))
    argv = ["--records", *(f"{label}={tmp_path / label}.json" for label in sets), "--out", str(tmp_path / "across.md"),
            "--claims", "early_auc@8:respo:above:seq_clip"]
    with pytest.raises(SystemExit) as stop:
        across.main(argv)
    assert stop.value.code == 1 and "stuck" in (tmp_path / "across.md").read_text().lower()




def warm_record(anneal, seed, pass1, greedy=1.0, converged_at=514, setting="default"):
    return {"config": {"sft_anneal": anneal, "sft_seed": seed, "model": "tiny-qwen3"}, "cpu_setting": setting,
            "warm_start": {"converged_at": converged_at, "steps": 642 if anneal == "converged" else 1014,
                           "seconds": 1},
            "heldout": {"heldout_pass@1": pass1, "heldout_acc": greedy}}


def test_the_warm_start_rule_passes_inside_the_widened_band_and_fails_outside_it():
    """research/WARMSTART.md's rule: within today's [min, max] +- 0.02, greedy >= today's least - 0.01, converged."""
    cfg = warm_start_stop.WarmStopConfig()
    today = [warm_record("budget", 0, 0.82), warm_record("budget", 1, 0.84)]
    band, line = warm_start_stop.verdict(today + [warm_record("converged", 0, 0.805),
                                                  warm_record("converged", 1, 0.859)], cfg)
    assert band.startswith("tiny-qwen3: today's band (2 records): pass@1 0.820-0.840")
    assert line.startswith("tiny-qwen3: --sft-anneal converged: PASS")
    for bad in (warm_record("converged", 1, 0.795), warm_record("converged", 1, 0.865),
                warm_record("converged", 1, 0.83, greedy=0.98), warm_record("converged", 1, 0.83, converged_at=None)):
        line = warm_start_stop.verdict(today + [warm_record("converged", 0, 0.83), bad], cfg)[1]
        assert "FAIL" in line and line.endswith("outside: default seed 1"), line
    assert warm_start_stop.verdict([warm_record("converged", 0, 0.83)], cfg) == \
        ["tiny-qwen3: no record of today's warm start: no band to compare with"]
    # Two candidates: each judged on its own cells against the same band, one line each.
    lines = warm_start_stop.verdict(today + [warm_record("converged", 0, 0.795), warm_record("converged-half", 0, 0.83),
                                             warm_record("converged-half", 3, 0.81)], cfg)
    assert [line.split(": ")[2][:4] for line in lines[1:]] == ["FAIL", "PASS"] and "converged-half" in lines[2]


def test_a_record_names_its_cpu_setting_and_the_command_that_made_it(monkeypatch):
    """common.provenance, which the gate and warm-start records share: the variables set come first."""
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    monkeypatch.delenv("MKL_ENABLE_INSTRUCTIONS", raising=False)
    made = common.provenance("research.gate1", ["--out", "a b.json"])
    assert made == {"command": "ATEN_CPU_CAPABILITY=default NANO_RESPO_CACHE=<empty dir> python -m "
                               "research.gate1 --out 'a b.json'", "cpu_setting": "unvectorised"}
    monkeypatch.delenv("ATEN_CPU_CAPABILITY")
    assert common.provenance("research.gate2", [], empty_cache=False) == \
        {"command": "python -m research.gate2", "cpu_setting": "default"}

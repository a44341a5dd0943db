"""research/reuse.py and reuse_rules.py (research/REUSE.md): the runs each stage makes under the paper's protocol,
one tiny run read end to end, and every pre-registered rule on records made up to exercise it."""

import math

import pytest

from research import reuse, reuse_rules as rules
from research.cli import parse_config


def test_each_stage_runs_its_cell_as_preregistered():
    lr = reuse.stage_runs("lr", None, 16)
    assert len(lr) == 6 and {n.split("-")[0] for n, _ in lr} == {"respo"}
    assert {reuse.train_config("respo", 1, 900, 1e-3).reuse} == {1}
    cell = reuse.stage_runs("evaluate", 1e-3, 16)
    assert len(cell) == 16 * 3 * 6 and len({n for n, _ in cell}) == len(cell)
    names = [n for n, _ in cell]
    assert names[:4] == ["grpo-N8-seed0", "grpo-N16-seed0", "grpo-N32-seed0", "grpo-N8-seed1"], "the check's runs first"
    assert {n.split("-")[0] for n in names[:48]} == {"grpo"} and "grpo" not in {n.split("-")[0] for n in names[48:]}
    assert {n.rsplit("seed", 1)[1] for n in names[48:48 + 15]} == {"0"}, "then seed-major: a stop leaves whole seeds"
    for name, flags in cell[::17]:
        c = parse_config(reuse.TrainConfig, flags)
        n = c.reuse
        assert (c.epochs, c.lag, c.prompts_per_iteration, c.iterations * n, c.group_size) == (1, 0, 4 * n, 256, 8)
        assert (c.loss.weight_against, c.loss.agg, c.adv_scale, c.temperature) == ("pi_old", "token-mean", "std", 1.0)
        assert (c.lr, c.lr_warmup_ratio, c.weight_decay, c.max_grad_norm) == (1e-3, 0.05, 0.1, 1.0)
        assert (c.model, c.task, c.sft.steps, c.sft.task_size, c.sft.full_share, c.max_new_tokens) == \
            ("tiny-qwen3", "digit_conflict", 1000, 11, 0.04, 32)
        assert name.startswith(c.loss.method + f"-N{n}-")
    assert len(reuse.stage_runs("evaluate", 1e-3, 8)) == 8 * 18


@pytest.mark.parametrize("argv,argument", [(["--stage", "gate1"], "stage"), (["--seeds", "17"], "seeds"),
                                           (["--lr", "-1"], "lr"), (["--only", "respo-N8-seed0"], "only")])
def test_bad_settings_name_the_argument(argv, argument, capsys):
    with pytest.raises(SystemExit):
        parse_config(reuse.ReuseConfig, argv)
    assert f"{argument}:" in capsys.readouterr().err


def test_per_update_counts_the_positives_and_their_tails():
    rows = {"step": [1, 1, 1, 2, 2], "advantage": [1.0, 0.5, -1.0, 2.0, 0.0], "log_w": [-0.1, -1.5, -3.0, -0.3, -2.0]}
    assert reuse.per_update(rows) == {"positives": [2, 1], "below_0.8": [1, 1], "log_w_below_-1": [1, 0]}


def test_a_tiny_run_is_recorded_with_its_command_and_summaries(model_cache):
    flags = reuse.train_argv("respo_pos_vespo_neg", 8, 3, 1e-3)
    for flag, value in (("--sft-steps", "8"), ("--iterations", "1")):
        flags[flags.index(flag) + 1] = value
    record = reuse.run_record(flags, [])
    assert record["train_command"].startswith("python train.py --protocol paper")
    assert (record["n"], record["updates"], len(record["score"]), len(record["positives"])) == (8, 8, 8, 8)
    assert record["summary"]["updates"] == 256 and math.isnan(record["summary"]["late"])  # cut short: no late score
    assert len(record["rollouts"]) == 1 and set(record["host"]) == {"cpu", "avx512f", "avx2"}


# --- the rules, on made-up records ---------------------------------------------------------------------------

def made_up(method, n, seed, late, early=0.2, heldout=0.05, deep=None, first=0.1, rollouts=None):
    """A record with the fields the rules read: deep = the share of positives with log W < -1 (and w < 0.8)."""
    deep = {8: 0.05, 16: 0.10, 32: 0.20}.get(n, 0.0) if deep is None else deep
    return {"method": method, "n": n, "seed": seed, "lr": 1e-3, "score": [first] + [late] * 255, "skipped_steps": 0,
            "summary": {"late": late, "early": early}, "heldout": {"heldout_pass@1": heldout},
            "positives": [100] * 256, "below_0.8": [round(100 * deep) + 5] * 256, "log_w_below_-1": [round(100 * deep)] * 256,
            "deep_low_w_pos_phi_mass": [0.3] * 256, "rollouts": rollouts or [{"sum 5": [seed, 8]}]}


def cell_records(seeds=16, respo_gain=0.1, arm_gain=-0.1, grows=True, wobble=0.01):
    out = []
    for s in range(seeds):
        noise = wobble * ((s % 3) - 1)
        for n in rules.NS:
            for m in rules.METHODS:
                gain = {"respo": respo_gain * n / 8}.get(m, respo_gain * n / 8 + arm_gain if m in rules.ARMS else 0.0)
                out.append(made_up(m, n, s, 0.3 + gain + noise * (m == "respo"), early=0.2 + gain,
                                   deep=None if grows else 0.1))
    return out


def test_the_lr_rule_takes_the_smallest_lr_within_the_tie_of_the_best_uncollapsed():
    runs = [made_up("respo", 1, s, late, first=0.1) | {"lr": lr}
            for lr, late in ((1e-4, 0.30), (3e-4, 0.395), (1e-3, 0.40)) for s in (900, 901)]
    assert rules.choose_lr(runs)[0] == 3e-4
    runs[-1]["summary"]["late"] = 0.01  # a 1e-3 run ends below half its first score: collapsed
    lr, table = rules.choose_lr(runs)
    assert lr == 3e-4 and "| 0.001 |" in table and "1 of 2" in table
    runs[2]["skipped_steps"] = 1  # now 3e-4 is out too
    assert rules.choose_lr(runs)[0] == 1e-4


def test_the_lr_table_prints_choose_finals_collapse_beside_the_late_score_reading():
    """A run whose last 5 updates fall below half its first score, with a late score above that half, is collapsed
    by choose_final's window only: the table counts it in its last column, and the lr rule (the late score) keeps it."""
    runs = [made_up("respo", 1, s, 0.30, first=0.4) | {"lr": 1e-4} for s in (900, 901)]
    runs[0]["score"] = runs[0]["score"][:-5] + [0.1] * 5
    assert not rules.collapsed(runs[0]) and rules.collapsed_as_choose_final(runs[0])
    lr, table = rules.choose_lr(runs)
    assert lr == 1e-4 and table.splitlines()[-1].endswith("| 0 of 2 | 1 of 2 |")


def test_the_manipulation_check_needs_both_shares_to_grow_and_the_rise_to_be_significant():
    runs = rules.cell(cell_records())
    check = rules.manipulation(runs, range(16))
    assert check["passed"] and check["per_n"][32]["log_w_below_-1"] == pytest.approx(0.2)
    assert check["p"] == pytest.approx(2 / 2 ** 16)
    flat = rules.manipulation(rules.cell(cell_records(grows=False)), range(16))
    assert not flat["passed"] and flat["grows"] == {"below_0.8": False, "log_w_below_-1": False}
    few = rules.manipulation(runs, range(5))  # 5 seeds: the smallest exact p is 2 / 32, above 0.05
    assert few["grows"]["log_w_below_-1"] and not few["passed"]
    assert rules.manipulation(runs, range(6))["passed"]  # 6: 2 / 64 (SMALLEST_CUT)


def test_the_check_is_an_increase_not_any_significant_change():
    """Pooled shares can grow while most seeds fall: seed 0 carries most positives and rises, 15 seeds fall."""
    records = [r for r in cell_records() if r["method"] == "grpo"]
    for r in records:
        if r["seed"] == 0:
            r["positives"] = [10_000] * 256
            r["log_w_below_-1"] = [{8: 500, 16: 2000, 32: 4000}[r["n"]]] * 256
            r["below_0.8"] = [{8: 600, 16: 2100, 32: 4100}[r["n"]]] * 256
        else:
            r["log_w_below_-1"] = [{8: 30, 16: 20, 32: 10}[r["n"]]] * 256
    check = rules.manipulation(rules.cell(records), range(16))
    assert all(check["grows"].values()) and check["p"] < 0.05 and sum(check["rise"]) < 0
    assert not check["passed"]


def test_the_check_reads_grpo_alone_and_says_interim_before_16_seeds():
    only_grpo = [r for r in cell_records() if r["method"] == "grpo"]
    x = rules.read_setting(only_grpo)
    assert x["check_final"] and x["check"]["passed"] and x["seeds"] == [] and not x["complete"]
    assert rules.reading(x, "G") == "not read (0 of 16 seeds)" and "contrasts" not in x
    early_look = rules.read_setting([r for r in only_grpo if r["seed"] < 6])
    assert rules.reading(early_look, "G") == "check interim (6 of 16 grpo seeds)"


def test_the_contrasts_holm_and_verdicts_follow_the_preregistered_rules():
    c = rules.contrasts(rules.cell(cell_records()), range(16))
    assert len(c) == 27
    assert c["C(8, grpo) late"]["reads"] == "higher" and c["C(32, vespo) early"]["mean"] == pytest.approx(0.4)
    assert c["T(gspo)"]["mean"] == pytest.approx((0.4 - 0.1) / 2, abs=1e-9) and c["T(gspo)"]["reads"] == "higher"
    assert c["S(respo_pos_clip_neg, 16)"]["reads"] == "lower"
    v = rules.verdicts(c)
    assert v == {**{f"{k}({n})": "supported" for k in "EL" for n in rules.NS}, "G": "supported", "B": "supported"}
    # an arm ahead of respo refutes B; respo no better than the baselines refutes E and L; a flat margin leaves G open
    v = rules.verdicts(rules.contrasts(rules.cell(cell_records(respo_gain=0.0, arm_gain=0.1)), range(16)))
    assert v["B"] == "refuted at this scale" and v["E(8)"] == v["L(32)"] == "refuted at this scale"
    assert v["G"] == "not resolved"  # T = 0 on every seed: the interval (0, 0) does not lie below 0
    tied = rules.contrasts(rules.cell(cell_records(respo_gain=0.0, arm_gain=0.0, wobble=0.0001)), range(16))
    assert tied["C(16, gspo) late"]["reads"] == "tie" and tied["C(16, gspo) late"]["held-out"][0] == 0


def test_holm_keeps_a_raw_p_below_005_unrejected_and_a_shrinking_margin_refutes_g():
    records = cell_records()
    for r in records:  # respo's late lead over grpo at N = 8: +0.05 on 12 seeds, -0.05 on 4 (p about 0.08 / 0.04)
        if r["method"] == "respo" and r["n"] == 8:
            r["summary"]["late"] = 0.3 + (0.05 if r["seed"] >= 4 else -0.05) + 0.001 * r["seed"]
        if r["method"] == "respo" and r["n"] == 32:  # the lead shrinks with N on every seed
            r["summary"]["late"] = 0.3 - 0.02 - 0.001 * r["seed"]
    c = rules.contrasts(rules.cell(records), range(16))
    x = c["C(8, grpo) late"]
    assert 0.05 / 27 < x["p"] < 0.05 and x["mean"] > 0 and x["reads"] == "not resolved"
    assert rules.verdicts(c)["G"] == "refuted at this scale"


def test_e_and_l_say_both_rules_when_a_significant_gain_is_under_the_margin():
    records = cell_records(respo_gain=0.002, wobble=0.0)  # respo ahead by 0.002 N / 8 on every seed: significant, small
    for r in records:
        if r["method"] == "respo":
            r["summary"]["late"] += 0.0001 * r["seed"]
    v = rules.verdicts(rules.contrasts(rules.cell(records), range(16)))
    assert v["L(8)"] == "supported, and refuted at this scale as a gain of the margin"


def test_a_verdict_needs_both_settings():
    passed = {"check": {"passed": True}, "check_final": True, "complete": True, "verdicts": {"G": "supported"}}
    assert rules.across({"default": passed, "unvectorised": passed}, "G") == "supported"
    failed = {"check": {"passed": False}, "check_final": True, "complete": True}
    assert rules.across({"default": passed, "unvectorised": failed}, "G") == \
        "not resolved (default: supported, unvectorised: check failed)"
    assert rules.across({"default": passed, "unvectorised": {}}, "G") == \
        "not resolved (default: supported, unvectorised: not run)"
    unpaired = {**passed, "verdicts": None}
    del unpaired["verdicts"]
    assert rules.reading(unpaired, "G") == "pairing failed"


def test_the_pairing_check_finds_a_run_that_saw_other_prompts_and_then_no_contrast_is_read():
    records = cell_records()
    assert rules.pairing_holds(rules.cell(records), range(16))
    records[3]["rollouts"] = [{"sum 5": [7, 8]}]
    assert not rules.pairing_holds(rules.cell(records), range(16))
    x = rules.read_setting(records)
    assert x["check"]["passed"] and not x["pairing"] and "contrasts" not in x


def test_summarise_reads_the_check_first_and_withholds_scores_until_the_cell_is_whole(tmp_path):
    import json
    for setting, seeds in (("default", 16), ("unvectorised", 3)):
        for r in cell_records(seeds=seeds):
            path = tmp_path / "out" / setting / "evaluate" / f"{r['method']}-N{r['n']}-seed{r['seed']}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(r))
    text = rules.summarise(tmp_path / "out", tmp_path / "figures")
    assert text.index("manipulation check") < text.index("## Contrasts, default") < text.index("## Verdicts")
    assert "unvectorised: 3 whole seeds of 16 (in progress: scores withheld and no contrast read before 16)" in text
    assert "## Contrasts, unvectorised" not in text and "tiny-qwen3, unvectorised" not in text
    assert "| unvectorised | 3 | 32 |" in text and "| interim |" in text  # its check, interim
    assert "- G: not resolved (default: supported, unvectorised: check interim (3 of 16 grpo seeds))" in text
    assert "Qwen3-30B-A3B (paper, one run) | 32 | 0.362" in text and "tiny-qwen3, default (16 seeds)" in text
    assert (tmp_path / "figures" / "reuse-evidence.png").exists()
    partial = tmp_path / "partial"
    (partial / "default").mkdir(parents=True)
    (tmp_path / "out" / "unvectorised").rename(partial / "unvectorised")
    withheld = rules.summarise(partial, None)
    assert "The tables of scores are withheld" in withheld and "late per method" not in withheld


def test_a_declared_cut_below_six_seeds_is_refused(capsys):
    with pytest.raises(SystemExit):
        parse_config(reuse.ReuseConfig, ["--seeds", "5"])
    assert "seeds: between 6" in capsys.readouterr().err
    assert parse_config(reuse.ReuseConfig, ["--seeds", "6"]).seeds == 6


def test_summarise_reads_the_committed_records(capsys, tmp_path):
    """The documented `python -m research.reuse --summarise`, on the records committed so far (the figure aside)."""
    reuse.main(["--summarise", "--figures", str(tmp_path)])
    text = capsys.readouterr().out
    assert "## The lr stage, default setting (it decides)" in text and "the rule's lr here: 0.0001" in text
    assert text.index("manipulation check") < text.index("## Verdicts")


def test_a_check_failed_on_both_settings_stops_the_study_with_grpos_descriptive_table(tmp_path):
    import json
    for setting in ("default", "unvectorised"):
        for r in cell_records(grows=False):
            if r["method"] == "grpo" or r["seed"] == 0:  # the order of amendment 1: grpo first, one seed of the rest
                path = tmp_path / setting / "evaluate" / f"{r['method']}-N{r['n']}-seed{r['seed']}.json"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(r))
    text = rules.summarise(tmp_path, None)
    assert "| default (16 seeds) | 32 | 0.200 (0.200 to 0.200) | 0.300 (0.300 to 0.300) |" in text and "0.118, 0.197; 0.362, 0.504" in text
    assert "- B: check failed" in text and "by REUSE.md the study stops here.\n\n## Post hoc" in text
    assert "late per method" not in text and "## Contrasts" not in text
    assert text.index("the study stops here") < text.index("| default | `respo` | **the published phi_-** |")


def test_the_post_hoc_drift_table_pools_each_cells_positives_as_the_check_does():
    """Made-up runs: the share pools positives over a cell's runs and their updates 1-128 (a run weighs by its
    positives; updates after 128 are not read), counts every run of the cell, and names each negative branch."""
    def run(method, n, seed, positives, deep, late_deep=0):
        return {"method": method, "n": n, "seed": seed, "positives": [positives] * 128 + [positives] * 128,
                "below_0.8": [deep] * 256, "log_w_below_-1": [deep] * 128 + [late_deep] * 128}
    records = [run("respo", 8, 0, 10, 1, late_deep=10), run("respo", 8, 1, 30, 9),  # (128 + 1152) / (1280 + 3840)
               run("grpo", 8, 0, 10, 0), run("grpo", 16, 0, 10, 2), run("grpo", 16, 1, 10, 0)]
    table = rules.drift_by_method(records)
    assert set(table) == {"grpo", "respo"} and set(table["respo"]) == {8}
    assert table["respo"][8] == (pytest.approx((128 + 1152) / (1280 + 3840)), 2)
    assert table["grpo"][16] == (pytest.approx(0.1), 2) and table["grpo"][8] == (0.0, 1)
    text = rules.drift_by_method_table({"default": records, "unvectorised": records[2:3]})
    assert "| default | `respo` | **the published phi_-** | 25.0% (2) | - | - |" in text
    assert "| default | `grpo` | the token clip | 0.0% (1) | 10.0% (2) | - |" in text
    assert "| unvectorised | `grpo` | the token clip | 0.0% (1) | - | - |" in text and text.count("\n") == 4
    assert {m for m in rules.METHODS if "published" in rules.NEGATIVE_BRANCH[m]} == {"respo"}

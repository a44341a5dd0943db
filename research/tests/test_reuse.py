"""research/reuse.py and reuse_rules.py (research/REUSE.md): the runs each stage makes under the paper's protocol,
one tiny run read end to end, and every pre-registered rule on records made up to exercise it."""

import math

import pytest

from research import reuse, reuse_rules as rules
from nano_respo.run.cli import parse_config


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
        assert (c.model, c.task, c.sft_steps, c.sft_task_size, c.sft_full_share, c.max_new_tokens) == \
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


def test_the_manipulation_check_needs_both_shares_to_grow_and_the_rise_to_be_significant():
    runs = rules.cell(cell_records())
    check = rules.manipulation(runs, range(16))
    assert check["passed"] and check["per_n"][32]["log_w_below_-1"] == pytest.approx(0.2)
    assert check["p"] == pytest.approx(2 / 2 ** 16)
    flat = rules.manipulation(rules.cell(cell_records(grows=False)), range(16))
    assert not flat["passed"] and flat["grows"] == {"below_0.8": False, "log_w_below_-1": False}
    few = rules.manipulation(runs, range(4))  # 4 seeds: the smallest exact p is 2 / 16, above 0.05
    assert few["grows"]["log_w_below_-1"] and not few["passed"]


def test_the_contrasts_holm_and_verdicts_follow_the_preregistered_rules():
    c = rules.contrasts(rules.cell(cell_records()), range(16))
    assert len(c) == 27
    assert c["C(8, grpo) late"]["reads"] == "higher" and c["C(32, vespo) early"]["mean"] == pytest.approx(0.4)
    assert c["T(gspo)"]["mean"] == pytest.approx((0.4 - 0.1) / 2, abs=1e-9) and c["T(gspo)"]["reads"] == "higher"
    assert c["S(respo_pos_clip_neg, 16)"]["reads"] == "lower"
    v = rules.verdicts(c)
    assert v == {**{f"{k}({n})": "supported" for k in "EL" for n in rules.NS}, "G": "supported", "B": "supported"}
    # an arm ahead of respo refutes B; respo below a margin over the baselines refutes E and L; no growth refutes G
    v = rules.verdicts(rules.contrasts(rules.cell(cell_records(respo_gain=0.0, arm_gain=0.1)), range(16)))
    assert v["B"] == "refuted at this scale" and v["E(8)"] == v["L(32)"] == "refuted at this scale"
    assert v["G"] in ("refuted at this scale", "not resolved")
    tied = rules.contrasts(rules.cell(cell_records(respo_gain=0.0, arm_gain=0.0, wobble=0.0001)), range(16))
    assert tied["C(16, gspo) late"]["reads"] == "tie" and tied["C(16, gspo) late"]["held-out"][0] == 0


def test_a_verdict_needs_both_settings():
    passed = {"check": {}, "complete": True, "verdicts": {"G": "supported"}}
    assert rules.across({"default": passed, "unvectorised": passed}, "G") == "supported"
    assert rules.across({"default": passed, "unvectorised": {"check": {}, "complete": True}}, "G") == \
        "not resolved (default: supported, unvectorised: check failed)"
    assert rules.across({"default": passed, "unvectorised": {}}, "G") == \
        "not resolved (default: supported, unvectorised: not run)"


def test_the_pairing_check_finds_a_run_that_saw_other_prompts():
    records = cell_records(seeds=2)
    assert rules.pairing_holds(rules.cell(records), [0, 1])
    records[3]["rollouts"] = [{"sum 5": [7, 8]}]
    assert not rules.pairing_holds(rules.cell(records), [0, 1])


def test_summarise_reads_the_check_first_and_states_a_cut(tmp_path):
    import json
    for setting, seeds in (("default", 16), ("unvectorised", 3)):
        for r in cell_records(seeds=seeds):
            path = tmp_path / "out" / setting / "evaluate" / f"{r['method']}-N{r['n']}-seed{r['seed']}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(r))
    text = rules.summarise(tmp_path / "out", tmp_path / "figures")
    assert text.index("manipulation check") < text.index("## Contrasts, default") < text.index("## Verdicts")
    assert "unvectorised: 3 whole seeds of 16 (in progress: no contrast is read before 16)" in text
    assert "## Contrasts, unvectorised" not in text
    assert "- G: not resolved (default: supported, unvectorised: not read (3 of 16 seeds))" in text
    cut = rules.summarise(tmp_path / "out", None, seeds_needed=3)  # a declared cut at 3 seeds: the check is read
    assert "unvectorised: 3 whole seeds of 16 (a declared cut)" in cut and "default: 3 whole seeds of 16" in cut
    assert "- G: check failed\n" in cut  # 3 seeds: the smallest exact p is 1/4, so the check cannot pass
    assert "Qwen3-30B-A3B (paper, one run) | 32 | 0.362" in text and (tmp_path / "figures" / "reuse-evidence.png").exists()


def test_summarise_reads_the_committed_records(capsys, tmp_path):
    """The documented `python -m research.reuse --summarise`, on the records committed so far (the figure aside)."""
    reuse.main(["--summarise", "--figures", str(tmp_path)])
    text = capsys.readouterr().out
    assert "## The lr stage (default setting decides)" in text and "the cell's lr: 0.0001" in text
    assert text.index("manipulation check") < text.index("## Verdicts")

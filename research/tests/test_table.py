"""research/table.py and table_rules.py (research/TABLE.md): the runs each stage makes, one tiny run of the runner's
first record and one tiny evaluate run read end to end, and every pre-registered rule on records made up to
exercise it (the lr rule, the check per method with its plateau, Holm, the verdicts, H, M's prefixes, partial
records)."""

import json
import math

import pytest

from research import decision, table, table_rules as rules
from research.cli import parse_config


# --- the design -------------------------------------------------------------------------------------------------

def test_each_stage_runs_its_cell_as_preregistered():
    lr = table.stage_runs("lr", None, 16)
    assert [n for n, _ in lr[:3]] == ["respo-lr0.0001-seed920", "respo-lr0.0001-seed921", "respo-lr0.0002-seed920"]
    assert len(lr) == 12
    for _, flags in lr:
        c = parse_config(table.TrainConfig, flags)
        assert (c.reuse, c.prompts_per_iteration, c.iterations, c.loss.method) == (1, 4, 256, "respo")
    cell = table.stage_runs("evaluate", 4e-4, 16)
    names = [n for n, _ in cell]
    assert len(cell) == 7 * 3 * 16 == len(set(names))
    assert {n.rsplit("seed", 1)[1] for n in names[:21]} == {"300"}, "seed-major: a stop leaves whole seeds"
    assert names[:8] == [f"{m}-N8-seed300" for m in rules.METHODS] + ["grpo-N16-seed300"]
    assert {int(n.rsplit("seed", 1)[1]) for n in names} == set(range(300, 316))
    for name, flags in cell[::11]:
        c = parse_config(table.TrainConfig, flags)
        n = c.reuse
        assert (c.epochs, c.lag, c.prompts_per_iteration, c.iterations * n, c.group_size) == (1, 0, 4 * n, 256, 8)
        assert (c.loss.weight_against, c.loss.agg, c.adv_scale, c.lr, c.lr_warmup_ratio) == \
            ("pi_old", "token-mean", "std", 4e-4, 0.05)
        assert (c.model, c.task, c.sft.steps, c.sft.task_size, c.sft.full_share, c.max_new_tokens) == \
            ("tiny-qwen3", "digit_conflict", 1000, 11, 0.04, 32)
        assert name == f"{c.loss.method}-N{n}-seed{c.seed}"
    assert len(table.stage_runs("evaluate", 4e-4, 8)) == 8 * 21
    assert not set(rules.SEEDS) & set(rules.SELECTION_SEEDS)


@pytest.mark.parametrize("argv,argument", [(["--stage", "gate1"], "stage"), (["--seeds", "9"], "seeds"),
                                           (["--seeds", "17"], "seeds"), (["--lr", "0"], "lr"),
                                           (["--only", "respo-N8-seed300"], "only")])
def test_bad_settings_name_the_argument(argv, argument, capsys):
    with pytest.raises(SystemExit):
        parse_config(table.TableConfig, argv)
    assert f"{argument}:" in capsys.readouterr().err


# --- records made up -----------------------------------------------------------------------------------------

POSITIVES = 1000  # per update: the share's resolution is 0.001


def made_up(method, n, seed, late=0.5, early=0.3, deep=0.10, mass=None, prefix=(0.4, 0.2), heldout=0.05,
            first=0.4, lr=4e-4, skipped=0, rollouts=None):
    """A record with every field the rules read; deep: the share of positives with log W < -1 at every update."""
    k = round(POSITIVES * deep)
    mass = 1.5 * deep if mass is None else mass
    return {"method": method, "n": n, "seed": seed, "lr": lr, "score": [first] + [late] * 255,
            "skipped_steps": skipped, "summary": {"late": late, "early": early},
            "heldout": {"heldout_pass@1": heldout}, "positives": [POSITIVES] * 256, "below_0.8": [k + 50] * 256,
            "log_w_below_-1": [k] * 256, "phi_pos": [float(POSITIVES)] * 256,
            "phi_deep_pos": [POSITIVES * mass] * 256, "deep_low_w_pos_phi_mass": [mass] * 256,
            "prefix": {"deep_n": [k] * 256, "deep_sum": [k * prefix[0]] * 256, "other_n": [POSITIVES - k] * 256,
                       "other_sum": [(POSITIVES - k) * prefix[1]] * 256},
            "rollouts": rollouts or [{"sum 5": [seed % 7, 8]}], "finished": f"2027-01-01T00:00:{seed % 60:02d}",
            "commit": "abc1234"}


DRIFT = {8: 0.06, 16: 0.13, 32: 0.14}  # a drifting method: level and rise, a plateau from 16 to 32


def cell_records(seeds=16, deep=None, gain=0.1, late_of=None, prefix=None):
    """Every method at every N on `seeds` seeds. deep: {method: {N: share}} (DRIFT for each by default); gain:
    respo's late and early lead over every other method; late_of(method, n, seed) overrides late."""
    out = []
    for i, s in enumerate(rules.SEEDS[:seeds]):
        wobble = 0.004 * ((i % 3) - 1)
        for n in rules.NS:
            for m in rules.METHODS:
                share = (deep or {}).get(m, DRIFT)[n] + (wobble if n == 32 else 0.0)
                late = late_of(m, n, s) if late_of else 0.5 + (gain if m == "respo" else 0.0) + wobble
                out.append(made_up(m, n, s, late=late, early=0.3 + (gain if m == "respo" else 0.0) + wobble,
                                   deep=share, prefix=(prefix or {}).get(m, (0.4 + wobble, 0.2))))
    return out


def write(tmp_path, records, setting="default", stage="evaluate"):
    folder = tmp_path / setting / stage
    folder.mkdir(parents=True, exist_ok=True)
    for r in records:
        name = (f"{r['method']}-lr{r['lr']:g}-seed{r['seed']}" if stage == "lr"
                else rules.run_name(r["method"], r["n"], r["seed"]))
        (folder / f"{name}.json").write_text(json.dumps(r))


# --- the lr rule -------------------------------------------------------------------------------------------------

def lr_records(collapse=()):
    """Both selection seeds at each lr of the grid; (lr, seed) in collapse: that run ends below half its start."""
    return [made_up("respo", 1, s, lr=lr, late=0.1 if (lr, s) in collapse else 0.6 - lr * 100, first=0.4)
            for lr in rules.LR_GRID for s in rules.SELECTION_SEEDS]


def test_the_lr_rule_picks_the_largest_lr_below_the_first_that_collapses_a_run():
    assert rules.choose_lr(lr_records())[0] == 8e-4, "the largest, though its late score is the lowest"
    assert rules.choose_lr(lr_records({(8e-4, 921), (6e-4, 920)}))[0] == 4e-4
    assert rules.choose_lr(lr_records({(8e-4, 921), (3e-4, 920)}))[0] == 2e-4, "a stable lr above a collapse: not read"
    skipped = [dict(r, skipped_steps=1) if r["lr"] == 8e-4 and r["seed"] == 920 else r for r in lr_records()]
    assert rules.choose_lr(skipped)[0] == 6e-4, "a skipped step is a collapse"
    every = {(lr, 920) for lr in rules.LR_GRID}
    chosen, text = rules.choose_lr(lr_records(every))
    assert chosen is None and "| 0.0008 |" in text


def test_the_lr_rule_waits_for_all_twelve_records():
    chosen, text = rules.choose_lr(lr_records()[:-1])
    assert chosen is None and "11 of 12 records" in text


# --- the manipulation check ---------------------------------------------------------------------------------

def checks_of(deep):
    runs = rules.cell(cell_records(deep=deep))
    return {m: rules.manipulation(runs, m, list(rules.SEEDS)) for m in rules.METHODS}


def test_the_check_passes_on_level_and_rise_and_a_plateau_from_16_to_32_does_not_fail_it():
    c = checks_of({})["grpo"]
    assert c["per_n"][16] == pytest.approx(0.13) and c["per_n"][32] == pytest.approx(0.14, abs=0.001)
    plateau = checks_of({"grpo": {8: 0.06, 16: 0.15, 32: 0.15}})["grpo"]
    falls = checks_of({"grpo": {8: 0.06, 16: 0.20, 32: 0.15}})["grpo"]
    assert c["passed"] and plateau["passed"] and falls["passed"], "nothing is required between N = 16 and 32"
    assert c["p"] < 0.05 and all(x > 0 for x in c["rise"])


def test_the_check_fails_below_the_level_or_without_a_significant_rise():
    low = checks_of({"gspo": {8: 0.01, 16: 0.03, 32: 0.045}})["gspo"]
    assert not low["level"] and low["rises"] and not low["passed"]
    flat = checks_of({"vespo": {8: 0.14, 16: 0.14, 32: 0.14}})["vespo"]  # the wobble: rises and falls alike
    assert flat["level"] and not flat["rises"] and not flat["passed"]
    falling = checks_of({"vespo": {8: 0.30, 16: 0.20, 32: 0.10}})["vespo"]
    assert falling["p"] < 0.05 and not falling["passed"], "a significant fall is no rise"


# --- the comparisons, Holm and the verdicts ---------------------------------------------------------------------

def read(records, seeds=16):
    return rules.read_setting(records, seeds)


def test_the_21_contrasts_are_holm_corrected_and_respo_ahead_is_supported():
    r = read(cell_records(gain=0.1))
    assert r["pairing"] and len(r["contrasts"]) == 21
    assert {c["reads"] for name, c in r["contrasts"].items() if name.startswith("C(")} == {"higher"}
    assert r["verdicts"]["L(32)"] == "supported" and r["verdicts"]["E(8)"] == "supported"
    assert r["verdicts"]["G"] == "not resolved", "the same gain at every N: a tie, neither growing nor shrinking"
    assert {c["reads"] for name, c in r["contrasts"].items() if name.startswith("T(")} == {"tie"}


def test_respo_behind_is_refuted_and_a_tie_reads_tie():
    behind = read(cell_records(gain=-0.1))
    assert behind["verdicts"]["L(16)"] == "refuted at this scale"
    assert {c["reads"] for n, c in behind["contrasts"].items() if n.startswith("C(")} == {"lower"}
    tied = read(cell_records(gain=0.0))
    assert {c["reads"] for n, c in tied["contrasts"].items() if n.startswith("C(")} == {"tie"}
    assert tied["verdicts"]["E(32)"] == "refuted at this scale"


def test_a_growing_margin_supports_g_and_a_shrinking_one_refutes_it():
    grows = read(cell_records(late_of=lambda m, n, s: 0.5 + (0.01 * n + 0.002 * (s % 3) if m == "respo" else 0)))
    assert grows["verdicts"]["G"] == "supported"
    shrinks = read(cell_records(late_of=lambda m, n, s: 0.5 + (0.2 - 0.005 * n + 0.002 * (s % 3) if m == "respo"
                                                                 else 0)))
    assert shrinks["verdicts"]["G"] == "refuted at this scale" and shrinks["verdicts"]["L(32)"] == "supported"


def test_a_baseline_without_drift_is_not_compared_and_the_verdict_names_it():
    r = read(cell_records(deep={"grpo": {8: 0.01, 16: 0.01, 32: 0.01}}))
    assert not r["checks"]["grpo"]["passed"] and r["checks"]["respo"]["passed"]
    assert {c["reads"] for n, c in r["contrasts"].items() if c["b"] == "grpo"} == {rules.NO_DRIFT}
    assert r["contrasts"]["C(8, grpo) late"]["test_reads"] == "higher", "the test still ran, in the family of 21"
    assert r["verdicts"]["L(8)"] == f"supported (against gspo, vespo; grpo: {rules.NO_DRIFT})"
    nothing = read(cell_records(deep={"respo": {8: 0.01, 16: 0.01, 32: 0.01}}))
    assert set(nothing["verdicts"].values()) == {rules.NO_DRIFT}, "respo's check failed: nothing is compared"


def test_holm_leaves_a_raw_p_below_005_unrejected_in_a_family_of_21():
    d = [0.05] * 13 + [-0.05] * 3
    p = rules.tested(d)["p"]
    assert 0.05 / 21 < p < 0.05
    family = {f"c{i}": rules.tested(list(d)) for i in range(21)}
    rules.holm_reads(family, rules.MARGIN)
    assert {c["reads"] for c in family.values()} == {"not resolved"}
    assert decision.holm({"a": p}) == {"a": True}


def test_a_verdict_is_stated_only_when_both_settings_give_it():
    ahead, behind = read(cell_records(gain=0.1)), read(cell_records(gain=-0.1))
    assert rules.across({"default": ahead, "unvectorised": ahead}, "verdicts", "L(8)") == "supported"
    text = rules.across({"default": ahead, "unvectorised": behind}, "verdicts", "L(8)")
    assert text == "not resolved (default: supported, unvectorised: refuted at this scale)"


def test_the_pairing_check_finds_a_run_that_saw_other_prompts():
    records = cell_records()
    records[5] = dict(records[5], rollouts=[{"sum 6": [1, 8]}])
    r = read(records)
    assert not r["pairing"] and "contrasts" not in r and "checks" in r


# --- H and M ---------------------------------------------------------------------------------------------------

def tail_deep(dneg):
    """respo and clip_pos_respo_neg (the published negative branch) drift by dneg more than their mirrors."""
    base = {8: 0.02, 16: 0.04, 32: 0.05}
    return {m: {n: v + (dneg * n / 32 if m in ("respo", "clip_pos_respo_neg") else 0) for n, v in base.items()}
            for m in rules.METHODS}


def test_h_is_supported_when_the_negative_branch_carries_the_tail_at_both_positive_branches():
    r = read(cell_records(deep=tail_deep(0.10)))
    family = r["tail"]["family"]
    assert len(family) == 4 and family["Dneg_respo share"]["mean"] == pytest.approx(0.10)
    assert family["Dneg_clip share"]["reads"] == "higher" and family["Dneg_respo mass"]["reads"] == "higher"
    assert r["h"] == "supported"
    both = {"default": r, "unvectorised": r}
    assert rules.h_across(both).startswith("supported (")
    assert r["tail"]["descriptive"]["Dpos_respo share"] == pytest.approx([0.0] * 16)


def test_h_is_refuted_when_a_negative_branch_moves_the_tail_less_than_002():
    r = read(cell_records(deep=tail_deep(0.0)))
    assert r["tail"]["family"]["Dneg_respo share"]["interval"][1] < 0.02 and r["h"] == "refuted"
    ok = read(cell_records(deep=tail_deep(0.10)))
    assert rules.h_across({"default": ok, "unvectorised": r}).startswith("refuted")


def test_h_is_refuted_when_the_share_moves_but_the_mass_does_not():
    records = cell_records(deep=tail_deep(0.10))
    mirror = {(r["n"], r["seed"]): r["phi_deep_pos"] for r in records if r["method"] == "respo_pos_clip_neg"}
    for r in records:  # respo's deep-tail positives get no more of the positive mass than its mirror's
        if r["method"] == "respo":
            r["phi_deep_pos"] = mirror[(r["n"], r["seed"])]
    r = read(records)
    assert r["tail"]["family"]["Dneg_respo share"]["reads"] == "higher"
    assert r["tail"]["family"]["Dneg_respo mass"]["interval"][1] < 0.02 and r["h"] == "refuted"


def test_shared_prefixes_on_a_hand_made_batch():
    """Two groups of 4 (one prompt each). Group 1: positives 0 (deep) and 1, negatives 2 (W < 1) and 3 (W > 1).
    Group 2: a positive and only positives or zero advantages: no negative, so it is not counted."""
    tokens = [[5, 6, 7, 8], [5, 9, 9, 0], [5, 6, 7, 1], [5, 9, 9, 9],
              [1, 2, 0, 0], [1, 3, 0, 0], [1, 2, 0, 0], [4, 0, 0, 0]]
    mask = [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1],
            [1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0], [1, 0, 0, 0]]
    advantages = [1.0, 0.5, -1.0, -0.5, 1.0, 0.0, 1.0, -0.0]
    log_w = [-1.5, -0.2, -0.3, 0.4, -2.0, 0.0, 0.1, 0.0]
    fractions = rules.shared_prefixes(tokens, mask, advantages, log_w, 4)
    # row 0 shares 5 6 7 with row 2 (W < 1): 3 of 4; row 1 shares "5" with row 2 (row 3, W > 1, is not counted).
    assert fractions == [(0.75, True), (1 / 3, False)]
    assert rules.prefix_summary(fractions) == {"deep_n": 1, "deep_sum": 0.75, "other_n": 1, "other_sum": 1 / 3}
    none_below = rules.shared_prefixes(tokens[:4], mask[:4], advantages[:4], [-1.5, -0.2, 0.3, 0.4], 4)
    assert none_below == [(0.0, True), (0.0, False)], "a negative in the group, none with W < 1: fraction 0"


def test_m_leaves_out_each_batchs_first_update_and_drops_seeds_without_a_deep_tail():
    r = made_up("respo", 32, 300, deep=0.1, prefix=(0.5, 0.2))
    r["prefix"]["other_sum"][0] = r["prefix"]["other_n"][0] * 0.9  # update 1: on-policy, left out
    assert rules.prefix_gap(r) == pytest.approx(0.3)
    assert rules.prefix_gap(made_up("respo", 32, 300, deep=0.0)) is None
    prefix = {m: (0.45, 0.2) for m in rules.M_ARMS}
    records = cell_records(deep={**{m: DRIFT for m in rules.METHODS}, "respo_pos_clip_neg": {8: 0, 16: 0, 32: 0}},
                           prefix=prefix)
    records = [x for x in records if not (x["method"] == "respo_pos_clip_neg" and x["n"] == 32)]
    records += [made_up("respo_pos_clip_neg", 32, s, deep=0.0 if i % 2 else 0.01, prefix=(0.2, 0.2 + 0.01 * (i % 3)))
                for i, s in enumerate(rules.SEEDS)]
    setting = read(records)
    m = setting["mechanism"]
    assert m["respo"]["mean"] == pytest.approx(0.25) and m["respo"]["p"] < 0.05 and m["respo"]["dropped"] == 0
    assert m["respo_pos_clip_neg"]["dropped"] == 8 and len(m["respo_pos_clip_neg"]["d"]) == 8
    assert setting["m"] == "supported"
    assert rules.m_across({"default": setting, "unvectorised": setting}).startswith("supported")
    refuted = read(cell_records(prefix={m: (0.1, 0.2) for m in rules.METHODS}))
    assert refuted["m"] == "refuted"
    assert rules.m_across({"default": setting, "unvectorised": refuted}).startswith("refuted")


# --- summarise ----------------------------------------------------------------------------------------------------

def test_partial_records_are_reported_as_partial_and_nothing_of_them_is_read(tmp_path):
    write(tmp_path, lr_records()[:5], stage="lr")
    write(tmp_path, cell_records(seeds=2)[:30])
    text = rules.summarise(tmp_path)
    assert "5 of 12 records" in text and "the rule's lr: none yet" in text
    assert "default: 30 records, 1 whole seeds; in progress: 306 of 336 records missing" in text
    assert "unvectorised: no evaluate record yet" in text
    assert "No setting's cell is whole" in text
    for withheld in ("manipulation check", "Verdicts", "late per method", "Beside the paper"):
        assert withheld not in text
    with pytest.raises(ValueError, match="^seeds:"):
        rules.summarise(tmp_path, 9)


def test_summarise_prints_everything_in_tables_order_and_reads_a_declared_cut(tmp_path):
    write(tmp_path, lr_records({(8e-4, 920)}), stage="lr")
    for setting in ("default", "unvectorised"):
        write(tmp_path, cell_records(seeds=11, gain=-0.1), setting=setting)
    partial = rules.summarise(tmp_path)
    assert "No setting's cell is whole" in partial
    assert "both settings hold 11 whole seeds: if compute has ended, the declared cut reads them" in partial
    text = rules.summarise(tmp_path, 10)
    order = ["## The records", "## The pairing check", "## The lr stage", "the rule's lr: 0.0006",
             "## First, the manipulation check", "## Verdicts", "## The 21 contrasts, default", "## H:", "## M,",
             "## late per method", "## Beside the paper", "## The positive-branch diagnostic"]
    where = [text.index(x) for x in order]
    assert where == sorted(where), "the pre-registered order"
    assert "- L(8): refuted at this scale" in text and "(a declared cut)" in text
    contrasts = text.split("## The 21 contrasts, default")[1].split("##")[0]
    assert "| lower |" in contrasts and "finished from 2027-01-01T00:00:" in text


# --- the runner, on tiny runs --------------------------------------------------------------------------------------

def tiny(monkeypatch, **values):
    """table.train_argv with tiny overrides (a warm start of 8 steps, a few rollout batches)."""
    argv = table.train_argv

    def small(*args):
        flags = argv(*args)
        for flag, value in values.items():
            flags[flags.index(flag) + 1] = value
        return flags
    monkeypatch.setattr(table, "train_argv", small)


def test_the_runners_first_record_is_written_with_its_commands_and_kept_on_resume(model_cache, monkeypatch, tmp_path,
                                                                                   capsys):
    tiny(monkeypatch, **{"--sft-steps": "8", "--iterations": "3"})
    cfg = parse_config(table.TableConfig, ["--stage", "lr", "--only", "respo-lr0.0001-seed920", "--out", str(tmp_path)])
    table.run_stage(cfg, "lr", None, ["--stage", "lr", "--out", str(tmp_path)])
    (path,) = tmp_path.glob("*/lr/respo-lr0.0001-seed920.json")
    record = json.loads(path.read_text())
    assert record["command"].endswith("python -m research.table --stage lr --only respo-lr0.0001-seed920")
    assert "python -m research.train --protocol paper" in record["train_command"]
    assert "--seed 920" in record["train_command"]
    assert record["config"]["invoked_as"].endswith(f"--stage lr --out {tmp_path}")
    assert (record["n"], record["updates"], len(record["score"]), len(record["phi_pos"])) == (1, 3, 3, 3)
    assert len(record["commit"]) == 40 and set(record["host"]) == {"cpu", "avx512f", "avx2"}
    assert record["pi_old_is_mu"] and set(record["prefix"]) == set(table.PREFIX_KEYS)
    assert record["summary"]["updates"] == 256 and math.isnan(record["summary"]["late"])
    assert "[1/1] respo-lr0.0001-seed920: early" in capsys.readouterr().out
    table.run_stage(cfg, "lr", None, [])
    out = capsys.readouterr().out
    assert "1 of 1 records of lr" in out and "running 0" in out and "[1/" not in out, "kept, not run again"


def test_an_evaluate_run_records_its_tails_mass_and_shared_prefixes(model_cache, parity_runs, monkeypatch):
    """A random warm start scored by parity (tests/conftest.py), so its groups have both signs and W drifts."""
    name, flags = table.stage_runs("evaluate", 1e-3, 16)[0]
    for flag, value in (("--sft-steps", "8"), ("--iterations", "1")):
        flags[flags.index(flag) + 1] = value
    record = table.run_record(name, "evaluate", 1e-3, flags, [])
    assert record["command"].endswith("--stage evaluate --lr 0.001 --only grpo-N8-seed300")
    assert record["updates"] == 8 and record["pi_old_is_mu"]
    p = record["prefix"]
    assert sum(p["deep_n"]) + sum(p["other_n"]) > 0 and all(0 <= s <= n for s, n in zip(p["other_sum"], p["other_n"]))
    assert all(d <= k for d, k in zip(p["deep_n"], record["log_w_below_-1"])), "only positives with a negative"
    assert sum(record["phi_pos"]) > 0 and all(d <= t + 1e-9 for d, t in zip(record["phi_deep_pos"], record["phi_pos"]))
    mass = [d / t for d, t in zip(record["phi_deep_pos"], record["phi_pos"]) if t > 0]
    logged = [x for x, t in zip(record["deep_low_w_pos_phi_mass"], record["phi_pos"]) if t > 0]
    assert mass == pytest.approx(logged, rel=1e-4, abs=1e-6), "the same mass as train.py's diagnostic, per update"
    assert len(record["rollouts"]) == 1

"""The reproduction check of research/lab/report.py: agreement within intervals, and stated claims."""

import json

import pytest

from research.lab.report import (Setting, agreement_rows, outcome_table, check_report, claim_result, load_records, paired_across,
                               parse_claim)
from research.toy.run import RunConfig, main


def records(values: dict, seeds=range(10), lr=0.01, shift=0.0) -> list[dict]:
    """Synthetic runs: values[(method, R)] = (centre, spread) of every outcome over the seeds."""
    out = []
    for (method, reuse), (centre, spread) in values.items():
        for seed in seeds:
            v = centre + shift + spread * ((seed * 7) % 5 - 2) / 2  # a fixed pattern around the centre
            out.append(dict(env="seq", method=method, reuse=reuse, seed=seed, lr=lr, loss={}, iterations=60,
                            early_auc=v, full_auc=v, final_reward=v, heldout_reward=v))
    return out


CELLS = {("respo", 8): (0.30, 0.1), ("seq_clip", 8): (0.05, 0.02)}
CLAIM = "early_auc@8:respo:above:seq_clip"


def test_agreeing_rerun_passes():
    reference = records(CELLS)
    rerun = records(CELLS, seeds=range(20, 30), shift=0.01)  # fresh seeds, a small shift
    text, passed = check_report(reference, rerun, [CLAIM], stuck_below=0.1)
    assert passed, text
    rows = agreement_rows(reference, rerun, stuck_below=0.1)
    assert len(rows) == 2 * 4 and all(r["rerun_in_reference"] and r["reference_in_rerun"] for r in rows)
    assert "8 of 8 (cell, metric) entries agree both ways" in text and "CHECK PASSED" in text


def test_disagreeing_rerun_is_flagged_and_a_failed_claim_fails_the_check():
    reference = records(CELLS)
    rerun = records({("respo", 8): (0.05, 0.02), ("seq_clip", 8): (0.05, 0.02)})  # respo's gain gone
    rows = agreement_rows(reference, rerun, stuck_below=0.1)
    respo = [r for r in rows if r["method"] == "respo"]
    assert not any(r["rerun_in_reference"] or r["reference_in_rerun"] for r in respo)
    assert all(r["rerun_in_reference"] for r in rows if r["method"] == "seq_clip")
    text, passed = check_report(reference, rerun, [CLAIM], stuck_below=0.1)
    assert not passed and "a claim does not hold on the rerun" in text
    assert "| respo | 8 | early AUC | 0.300 ± " in text and "| NO | NO |" in text
    # Disagreeing cells alone are reported, not failed (about one in ten does so by chance).
    assert check_report(reference, rerun, [], stuck_below=0.1)[1]


def test_a_cell_run_with_other_settings_fails():
    reference = records(CELLS)
    rerun = records(CELLS, lr=0.03)
    text, passed = check_report(reference, rerun, [], stuck_below=0.1)
    assert not passed and "settings differ" in text


def test_claims_read_the_paired_interval():
    recs = records(CELLS)
    holds, mean, half, pairs = claim_result(recs, CLAIM)
    assert holds and pairs == 10 and mean == pytest.approx(0.25) and half < 0.25
    assert not claim_result(recs, "early_auc@8:respo:below:seq_clip")[0]
    assert claim_result(recs, "early_auc@8:seq_clip:below:respo")[0]
    assert not claim_result(recs, "early_auc@16:respo:above:seq_clip")[0]  # no runs at R = 16: cannot hold
    assert parse_claim(" heldout_reward@32:respo:below:gspo ") == ("heldout_reward", Setting(32), "respo", "below", "gspo")
    assert parse_claim("early_auc@4+lag2:respo:above:seq_clip")[1] == Setting(4, 2)
    for bad in ("early_auc:respo>seq_clip@8", "speed@8:respo:above:grpo", "early_auc@8:respo:over:grpo"):
        with pytest.raises(ValueError, match="claims"):
            parse_claim(bad)


def test_check_never_writes_into_the_reference(tmp_path):
    (tmp_path / "runs.jsonl").write_text("")
    with pytest.raises(ValueError, match="out"):
        RunConfig(check=str(tmp_path), out=str(tmp_path))
    with pytest.raises(ValueError, match="out"):
        RunConfig(check=str(tmp_path / "runs.jsonl"), out=str(tmp_path))
    with pytest.raises(ValueError, match="check"):
        RunConfig(check=str(tmp_path / "missing"), out=str(tmp_path / "rerun"))


def test_check_command_end_to_end(tmp_path):
    """Rerun a committed-like folder on the same seeds: it agrees; a claim that is false exits 1."""
    args = ["--env", "bandit", "--methods", "respo", "grpo", "--reuse", "4", "--seeds", "0", "1",
            "--iterations", "3", "--heldout-samples", "4"]
    reference = tmp_path / "reference"
    main(args + ["--out", str(reference)])
    before = (reference / "runs.jsonl").read_text()
    main(args + ["--out", str(tmp_path / "rerun"), "--check", str(reference)])  # passes: no exit
    assert "CHECK PASSED" in (tmp_path / "rerun" / "check.md").read_text()
    with pytest.raises(SystemExit) as exit_info:
        main(args + ["--out", str(tmp_path / "rerun"), "--check", str(reference),
                     "--claims", "early_auc@4:respo:above:respo"])  # a method never beats itself
    assert exit_info.value.code == 1
    assert (reference / "runs.jsonl").read_text() == before
    assert len(load_records(str(reference))) == 4 and json.loads(before.splitlines()[0])["method"] == "respo"


def test_paired_across_settings_keeps_only_what_every_setting_carries():
    strong = records(CELLS)
    weak = records({("respo", 8): (0.06, 0.1), ("seq_clip", 8): (0.05, 0.02)})  # gain within noise
    table = paired_across({"default": strong, "avx2": strong}, "early_auc")
    assert "| seq_clip | 8 | **0.250 ± " in table and table.rstrip().endswith("| respo higher |")
    table = paired_across({"default": strong, "avx2": weak}, "early_auc")
    assert table.rstrip().endswith("| no |") and "(10)" in table


def test_across_command_writes_every_metric_and_the_stuck_counts(tmp_path):
    from research.toy.across import main as across

    for name, cells in (("default", CELLS), ("avx2", {("respo", 8): (0.05, 0.02), ("seq_clip", 8): (0.05, 0.02)})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records(cells)))
    across(["--records", str(tmp_path / "default"), str(tmp_path / "avx2"), "--out", str(tmp_path / "a.md"),
            "--reference", "respo"])
    text = (tmp_path / "a.md").read_text()
    assert text.count("| respo minus | R | default | avx2 |") == 4
    assert "| respo | 8 | 0/10 | 10/10 |" in text  # final rewards 0.2..0.4 (default), 0.03..0.07 (avx2)
    assert "| seq_clip | 8 | 10/10 | 10/10 |" in text


def test_across_record_sets_replace_whole_cells(tmp_path):
    from research.toy.across import record_set

    for name, cells in (("base", CELLS), ("variant", {("respo", 8): (0.9, 0.0)})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records(cells, lr=0.5)))
    label, merged = record_set(f"mine={tmp_path / 'base'}+{tmp_path / 'variant'}")
    assert label == "mine" and len(merged) == 20
    assert {r["early_auc"] for r in merged if r["method"] == "respo"} == {0.9}
    assert record_set(str(tmp_path / "base"))[0] == "base"


def test_runs_at_one_reuse_but_different_lags_are_separate_cells():
    records = [{"method": m, "reuse": 4, "lag": lag, "seed": s, "lr": 1e-3, "early_auc": 0.1 * lag + s / 100,
                "full_auc": 0.5, "final_reward": 0.5, "heldout_reward": 0.5}
               for m in ("respo", "seq_clip") for lag in (0, 2) for s in range(3)]
    table = outcome_table(records, stuck_below=0.1)
    assert "| respo | 4 |" in table and "| respo | 4, lag 2 |" in table
    assert table.count("| 3 |") == 4  # every cell holds its own three seeds, none overwritten


def test_records_are_read_from_a_gzipped_file_and_a_plain_one_in_the_same_folder(tmp_path):
    import gzip

    rows = [{"method": "respo", "reuse": 4, "seed": s} for s in range(3)]
    with gzip.open(tmp_path / "runs.jsonl.gz", "wt") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows[:2]))
    (tmp_path / "runs.jsonl").write_text(json.dumps(rows[2]) + "\n")
    assert load_records(str(tmp_path)) == rows
    assert load_records(str(tmp_path / "runs.jsonl.gz")) == rows[:2]

"""research/toy/stuck.py: the stuck-run table and figure, on synthetic records with per-batch curves."""

import json

import pytest

from research.toy.run import job_id, run_jobs
from research.toy.stuck import PANELS, coasting_share, main, plot_stuck, summary_table
from toy.train import Job, train

KERNEL = {"wtilt_alpha_pos": 0.0, "wtilt_lambda_pos": 0.1, "wtilt_alpha_neg": 3.0, "wtilt_lambda_neg": 2.0}


def run(seed, stuck, iterations=8):
    """A stuck run has one signal batch, then none; its weights keep moving, less each batch."""
    zero_var = [1.0, 0.8] + [1.0] * (iterations - 2) if stuck else [1.0] + [0.5] * (iterations - 1)
    moved = [0.0, 2.0] + [1.0 / k for k in range(1, iterations - 1)] if stuck else [0.0] + [0.5] * (iterations - 1)
    reward = [0.0, 0.02] + [0.0] * (iterations - 2) if stuck else [0.1 * k for k in range(iterations)]
    record = dict(env="seq", method="respo_wtilt", reuse=4, seed=seed, lr=0.03, loss=dict(KERNEL), iterations=iterations,
                  early_auc=sum(reward[:2]) / 2, final_reward=reward[-1], heldout_reward=0.0 if stuck else 0.5,
                  reward_curve=reward, zero_var_curve=zero_var, update_norm_curve=moved)
    for key, _ in PANELS:
        record.setdefault(key, [1.0] * iterations)
    return record


def test_coasting_share_counts_movement_in_signal_free_batches():
    stuck, healthy = run(0, True), run(1, False)
    assert coasting_share(stuck, 2) == 0.0  # batch 0 moved nothing, batch 1 had signal
    assert coasting_share(stuck, 4) == pytest.approx((1.0 + 0.5) / (2.0 + 1.0 + 0.5))
    assert coasting_share(healthy, 8) == 0.0


def test_summary_table_counts_stuck_runs_per_cell():
    records = [run(s, s < 2, iterations=16) for s in range(5)]
    table = summary_table(records, stuck_below=0.1)
    assert "| respo_wtilt | 0.03 | 0, 0.1, 3, 2 | 4 | 5 | 2/5 |" in table
    assert "kernel (wtilt_alpha_pos, wtilt_lambda_pos, wtilt_alpha_neg, wtilt_lambda_neg)" in table
    assert table.rstrip().endswith("| 0.43 / 0.00 |")  # over the first quarter, 4 batches


def test_figure_and_command(tmp_path):
    records = [run(s, s == 0) for s in range(3)]
    plot_stuck(records, str(tmp_path / "a.png"), stuck_below=0.1)
    assert (tmp_path / "a.png").stat().st_size > 1000
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    main(["--records", str(tmp_path), "--out", str(tmp_path / "b.png")])
    assert (tmp_path / "b.png").exists()
    with pytest.raises(SystemExit, match="no respo_wtilt runs"):
        main(["--records", str(tmp_path), "--reuse", "8", "--out", str(tmp_path / "c.png")])


def test_skip_silent_steps_leaves_the_weights_alone_in_batches_without_signal(tmp_path):
    job = Job(env="seq", method="respo", reuse=4, seed=7, lr=0.03, iterations=12)
    record = train(job, skip_silent_steps=True)
    silent = [m for m, z in zip(record["update_norm_curve"], record["zero_var_curve"]) if z == 1.0]
    assert all(m == 0.0 for m in silent)
    assert any(m > 0 for m in record["update_norm_curve"]) and record["skip_silent_steps"]
    # The runner keeps the two kinds of run apart: same job, different record.
    assert job_id(job) != job_id(job, skip_silent_steps=True)
    plain = run_jobs([job], str(tmp_path))[0]
    skipped = run_jobs([job], str(tmp_path), skip_silent_steps=True)[0]
    assert "skip_silent_steps" not in plain and skipped["skip_silent_steps"]

"""plots.png as a reader meets it: a title naming the run, labelled axes, defined terms, a note on an empty panel
that hides no data and is true of the run it describes."""

import json
from pathlib import Path

import pytest

from nano_respo.plots import plot_run, write_plots
from nano_respo.runs import read_metrics


def fake_run(tmp_path, low_w_share: float, reuse: int = 4, epochs: int = 2, low_w_at=None, no_positives_at=()) -> Path:
    """A run directory with config.json and metrics.jsonl as train.py writes them (3 iterations): low-w positives
    at the steps low_w_at (default: every step but a batch's first); a step in no_positives_at had no correct
    answer, so its share is logged as null."""
    config = {"name": "fake", "model": "tiny-qwen3", "method": "seq_clip", "reuse": reuse, "epochs": epochs,
              "task": "reverse", "diag_eps": 0.2}
    (tmp_path / "config.json").write_text(json.dumps(config))
    lines = [{"kind": "eval", "iteration": 0, "step": 0, "heldout_acc": 0.5, "heldout_pass@1": 0.4}]
    for step in range(3 * reuse):
        stats = {f"log_w_q{q}_{s}": -0.1 * (step % reuse) * (q / 50) for q in (10, 50, 90) for s in ("pos", "neg")}
        low_w = low_w_share * (step % reuse > 0 if low_w_at is None else step + 1 in low_w_at)
        lines.append({"kind": "train", "iteration": step // reuse, "step": step + 1, "reward": 0.3 + 0.01 * step,
                      "low_w_pos_frac": None if step + 1 in no_positives_at else low_w,
                      "low_w_pos_phi_mass": low_w_share / 2, "phi_low_w_pos": 0.6 if low_w else None, **stats})
    lines.append({"kind": "eval", "iteration": 3, "step": 3 * reuse, "heldout_acc": 0.6, "heldout_pass@1": 0.5})
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return tmp_path


@pytest.mark.parametrize("low_w_share, note_expected", [(0.0, True), (0.3, False)])
def test_plots_png_explains_itself_and_hides_no_data(tmp_path, low_w_share, note_expected):
    fig = plot_run(fake_run(tmp_path, low_w_share))
    title = fig._suptitle.get_text()
    assert all(part in title for part in ("fake", "tiny-qwen3", "seq_clip", "reuse 4 (2 epochs x 2 mini-batches)"))
    reward, heldout, drift, count, weight, key = fig.axes
    for ax in (reward, heldout, drift):
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel() and ax.get_legend() is not None
    # The starvation panel: how many (top) and what each gets (below), each on its own y-axis, each line named in
    # one key beneath them; nothing written over the data.
    assert count.get_title() and count.get_ylabel() == "share" and weight.get_ylabel() == "phi"
    assert weight.get_xlabel() == "optimizer step"
    assert count.get_legend() is None and weight.get_legend() is None and not count.texts and not weight.texts
    legend = [text.get_text() for text in key.get_legend().get_texts()]
    assert legend[0].startswith("how many: the share of correct answers") and legend[1].startswith("what one gets")
    assert legend[2].startswith("phi = 0.8:") and set(weight.get_lines()[1].get_ydata()) == {0.8}
    if low_w_share:
        share, phi = count.get_lines()[0], weight.get_lines()[0]
        assert max(share.get_ydata()) == low_w_share and set(phi.get_ydata()) == {0.6}
    notes = [text for text in key.texts if "Rare in this run" in text.get_text()]
    assert bool(notes) == note_expected
    renderer = fig.canvas.get_renderer()
    for text in [*notes, key.get_legend()]:
        for data in (count, weight):
            assert not text.get_window_extent(renderer).overlaps(data.get_window_extent(renderer))
    glossary = " ".join(text.get_text() for text in fig.texts)
    for term in ("A:", "w = pi(y|x) / mu(y|x)", "phi:", "eps:"):
        assert term in glossary
    assert write_plots(tmp_path).stat().st_size > 0


def test_the_rare_answers_note_counts_the_runs_own_steps_and_advises_more_reuse_than_it_had(tmp_path):
    run = fake_run(tmp_path, 0.25, reuse=8, epochs=1, low_w_at=(6, 20), no_positives_at=(3, 11))
    fig = plot_run(run)
    note = " ".join(" ".join(text.get_text() for text in fig.axes[-1].texts).split())
    train = [r for r in read_metrics(run) if r["kind"] == "train"]
    shares = [r["low_w_pos_frac"] for r in train if r["low_w_pos_frac"] is not None]
    seen = sum(share > 0 for share in shares)
    assert (len(train), len(shares), seen) == (24, 22, 2)  # every step, those with a correct answer, the low-w
    assert (f"appeared at {seen} of its {len(train)} optimizer steps ({len(train) - len(shares)} steps had no "
            f"correct answer to count); at the step where they were most common, {max(shares):.1%} of its "
            "correct answers.") in note
    assert "more reuse (this run's is 8: --reuse 16)" in note
    assert "reuse 8 (1 epoch x 8 mini-batches)" in fig._suptitle.get_text()

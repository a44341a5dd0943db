"""plots.png as a reader meets it: a title naming the run, labelled axes, defined terms, a note on an empty panel."""

import json
from pathlib import Path

import pytest

from nano_respo.run.metrics import plot_run, write_plots


def fake_run(tmp_path, low_w_share: float) -> Path:
    """A run directory with config.json and metrics.jsonl as train.py writes them (3 iterations x reuse 4)."""
    config = {"name": "fake", "model": "tiny-qwen3", "method": "seq_clip", "reuse": 4, "epochs": 2,
              "task": "reverse", "diag_eps": 0.2}
    (tmp_path / "config.json").write_text(json.dumps(config))
    lines = [{"kind": "eval", "iteration": 0, "step": 0, "heldout_acc": 0.5, "heldout_pass@1": 0.4}]
    for step in range(12):
        stats = {f"log_w_q{q}_{s}": -0.1 * (step % 4) * (q / 50) for q in (10, 50, 90) for s in ("pos", "neg")}
        lines.append({"kind": "train", "iteration": step // 4, "step": step + 1, "reward": 0.3 + 0.01 * step,
                      "low_w_pos_frac": low_w_share * (step % 4 > 0), "low_w_pos_phi_mass": low_w_share / 2,
                      "phi_low_w_pos": 0.6 if low_w_share and step % 4 else None,
                      **stats})
    lines.append({"kind": "eval", "iteration": 3, "step": 12, "heldout_acc": 0.6, "heldout_pass@1": 0.5})
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return tmp_path


@pytest.mark.parametrize("low_w_share, note_expected", [(0.0, True), (0.3, False)])
def test_plots_png_explains_itself(tmp_path, low_w_share, note_expected):
    fig = plot_run(fake_run(tmp_path, low_w_share))
    title = fig._suptitle.get_text()
    assert all(part in title for part in ("fake", "tiny-qwen3", "seq_clip", "reuse 4"))
    panels, right_axis = fig.axes[:4], fig.axes[4]
    for ax in panels:
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
        assert ax.get_legend() is not None
    assert right_axis.get_ylabel() and right_axis.bbox.bounds == panels[3].bbox.bounds
    # The starvation panel: how many (left) and what each gets (right), each line named in one legend.
    legend = [text.get_text() for text in panels[3].get_legend().get_texts()]
    assert legend[0].startswith("left: share of correct answers") and legend[1].startswith("right: the weight phi")
    if low_w_share:
        share, weight = panels[3].get_lines()[0], right_axis.get_lines()[0]
        assert max(share.get_ydata()) == low_w_share and set(weight.get_ydata()) == {0.6}
    glossary = " ".join(text.get_text() for text in fig.texts)
    for term in ("A:", "w = pi(y|x) / mu(y|x)", "phi:", "eps:"):
        assert term in glossary
    low_w_panel = fig.axes[3]
    notes = [text.get_text() for text in low_w_panel.texts]
    assert any("Rare in this run" in note for note in notes) == note_expected
    assert write_plots(tmp_path).stat().st_size > 0

"""metrics.jsonl (one JSON object per line, flushed at once), optional TensorBoard, plots.

Records have a "kind": "train" (one per optimizer step), "eval" (held-out figures) or
"time" (wall time of one iteration). Timing keys are the only ones that differ between a
resumed run and an uninterrupted one.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

TIMING_KEYS = {"gen_tokens_per_s", "train_tokens_per_s", "iteration_s"}


def read_metrics(run_dir: Path) -> list[dict]:
    """The records of run_dir/metrics.jsonl; a cut-off last line is dropped with a note.

    A run stopped while writing (kill, full disk) leaves its last line without the newline
    that ends every record: that record never completed, and the rest of the file is sound.
    MetricsLog rewrites the file without it when the run resumes.
    """
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    records, cut_line = parse_metrics(path)
    if cut_line is not None:
        print(f"metrics: dropped the cut-off last line {cut_line} of {path} (the run stopped while writing it)")
    return records


def parse_metrics(path: Path) -> tuple[list[dict], int | None]:
    """(records, line number of an unfinished last line or None); any other unreadable line is an error."""
    lines = path.read_bytes().decode("utf-8", errors="replace").split("\n")  # the last item follows the last newline
    records, cut_line = [], None
    for line_no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if isinstance(record, dict):
            records.append(record)
        elif line_no == len(lines):  # no newline after it: the write never finished
            cut_line = line_no
        else:
            raise ValueError(f"metrics: {path}:{line_no} is not a JSON record; repair or delete that line")
    return records, cut_line


class MetricsLog:
    """Appends records; on resume first drops those written after the checkpoint it resumes from."""

    def __init__(self, run_dir: Path, keep_until_iteration: int | None = None):
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / "metrics.jsonl"
        self.records = []
        if keep_until_iteration is not None:
            self.records = [r for r in read_metrics(run_dir) if r["iteration"] < keep_until_iteration
                            or (r["kind"] == "eval" and r["iteration"] == keep_until_iteration)]
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text("".join(json.dumps(r) + "\n" for r in self.records))
            tmp.replace(self.path)
        self.file = open(self.path, "a")
        self.tensorboard = None
        try:
            from torch.utils.tensorboard import SummaryWriter
            self.tensorboard = SummaryWriter(str(run_dir / "tensorboard"))
        except ImportError:  # TensorBoard is optional
            pass

    def write(self, record: dict) -> None:
        record = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
        self.records.append(record)
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()
        if self.tensorboard is not None:
            for key, value in record.items():
                if isinstance(value, (int, float)) and key not in ("iteration", "step"):
                    self.tensorboard.add_scalar(f"{record['kind']}/{key}", value, record["step"])

    def last_eval(self) -> dict | None:
        evals = [r for r in self.records if r["kind"] == "eval"]
        return evals[-1] if evals else None

    def close(self) -> None:
        self.file.close()
        if self.tensorboard is not None:
            self.tensorboard.close()


def write_plots(run_dir: Path) -> Path:
    """plots.png: reward, held-out accuracy, log-w quantiles per advantage sign, starved-positive phi mass."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(run_dir)
    train = [r for r in records if r["kind"] == "train"]
    evals = [r for r in records if r["kind"] == "eval"]

    def series(rows, key):
        points = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        return [p[0] for p in points], [p[1] for p in points]

    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    ax = axes[0, 0]
    ax.plot(*series(train, "reward"), label="rollout reward")
    ax.set(title="reward (mean over the rollout batch)", xlabel="optimizer step")
    ax = axes[0, 1]
    for key in ("heldout_acc", "heldout_pass@1"):
        ax.plot(*series(evals, key), marker="o", label=key)
    ax.set(title="held-out", xlabel="optimizer step", ylim=(-0.02, 1.02))
    ax.legend()
    ax = axes[1, 0]
    for sign, color in (("pos", "tab:green"), ("neg", "tab:red")):
        ax.plot(*series(train, f"log_w_q50_{sign}"), color=color, label=f"median log w, A {'>' if sign == 'pos' else '<'} 0")
        x, lo = series(train, f"log_w_q10_{sign}")
        x2, hi = series(train, f"log_w_q90_{sign}")
        if x == x2 and x:
            ax.fill_between(x, lo, hi, color=color, alpha=0.2)
    ax.set(title="sequence log-weight (10-90% band)", xlabel="optimizer step")
    ax.legend()
    ax = axes[1, 1]
    ax.plot(*series(train, "low_w_pos_frac"), label="share of positives with w < 1 - eps")
    ax.plot(*series(train, "low_w_pos_phi_mass"), label="their share of positive phi mass")
    ax.set(title="under-generated positives", xlabel="optimizer step", ylim=(-0.02, 1.02))
    ax.legend()
    fig.tight_layout()
    path = Path(run_dir) / "plots.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

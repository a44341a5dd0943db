"""ReSPO against clipping under rollout reuse and staleness on the tiny Qwen3, dense and MoE.

    python -m research.run                                  # the whole grid, resumable
    python -m research.run --models tiny-qwen3 --methods respo_wtilt grpo --settings 8 --seeds 0   # one cell
    python -m research.run --settings 4 8 4+lag2 --lrs respo_wtilt=1e-3 seq_clip=3e-4   # reuse, staleness, own lrs
    python -m research.run --report-only                    # tables and figures of the runs so far
    python -m research.run ... --check research/results/default/records.json --claims early_auc@8:respo_wtilt:above:seq_clip
                                                               # a rerun judged against committed records

Every run is one `python train.py` with a fixed budget of rollout batches (--iterations),
written to <out-dir>/<model>/<method>-reuse<R>[-lag<K>]-seed<S>/; the records and figures go to
<out-dir> too unless --records / --figures name other places (the committed ones live in
research/results/ and research/figures/). A finished run (its last eval line
at the final iteration) is skipped; an unfinished one is resumed from its checkpoint, so the
grid runs in chunks: stop it any time and start it again. Runs go to `--workers` parallel
processes of one torch thread each. The tables (means with 95% CIs over seeds, paired
ReSPO-minus-baseline differences on the same seeds, low-w diagnostics) come from
research/lab/report.py, the same code that reports the toy.

The committed grids (research/results/{default,avx2}/) ran this project's reconstruction of ReSPO, now
`respo_wtilt`, the default first method here; what else they relied on of the defaults of the time is pinned in
research/common.py (two epochs, --agg seq-mean-token-sum-norm), so their recorded commands rerun as they ran.
`--methods respo ...` runs the published kernel, under the same pins (not the paper's token-mean).
"""

from __future__ import annotations

import json
from pathlib import Path


from research.common import ExperimentConfig, finished, grid, record_of, run_dir, run_grid
from research.cli import parse_config
from nano_respo.runs import read_metrics
from research.lab.report import check_report, claims_table, diagnostics_table, outcome_table, paired_table, plot_rewards


def write_records(path: Path, models: list[str], records: list[dict]) -> None:
    """Replace these models' records in the file, keeping the others': one file can hold every model."""
    kept = [r for r in json.loads(path.read_text()) if r["model"] not in models] if path.exists() else []
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(kept + records, indent=0))


def report(cfg: ExperimentConfig) -> str:
    sections, everything = [], []
    for model in cfg.models:
        cells = grid(cfg, model)
        records = [record_of(run_dir(cfg, *c), *c) for c in cells
                   if finished(read_metrics(run_dir(cfg, *c)), cfg.iterations)]
        if not records:
            continue
        everything += records
        Path(cfg.figures).mkdir(parents=True, exist_ok=True)
        figure = Path(cfg.figures) / f"{model}-reward.png"
        plot_rewards(records, str(figure), title=f"{model}: training reward per rollout batch")
        sections += [f"## {model} ({len(records)} of {len(cells)} runs finished)", "",
                     f"![reward curves]({figure.relative_to(Path(cfg.figures).parent)})", "",
                     outcome_table(records, cfg.stuck_below), "",
                     paired_table(records, reference=cfg.methods[0]), "",
                     diagnostics_table(records), ""]
    if everything:
        write_records(Path(cfg.records), cfg.models, everything)
    return "\n".join(sections) or "no finished runs yet"


def check(cfg: ExperimentConfig) -> bool:
    """These runs against --check's records and --claims, model by model; writes <out_dir>/check.md."""
    records = json.loads(Path(cfg.records).read_text()) if Path(cfg.records).exists() else []
    reference = json.loads(Path(cfg.check).read_text()) if cfg.check else []
    parts, passed = [], True
    for model in cfg.models:
        mine = [r for r in records if r["model"] == model]
        if cfg.check:
            text, holds = check_report([r for r in reference if r["model"] == model], mine, cfg.claims,
                                       cfg.stuck_below)
        else:
            text, holds = claims_table(cfg.claims, {"these runs": mine})
        parts.append(f"# {model}\n\n{text}")
        passed = passed and holds
    Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
    (Path(cfg.out_dir) / "check.md").write_text("\n\n".join(parts) + "\n")
    print("\n" + "\n\n".join(parts) + f"\n\nwrote {Path(cfg.out_dir) / 'check.md'}")
    return passed


def main(argv=None):
    cfg = parse_config(ExperimentConfig, argv)
    if not cfg.report_only:
        run_grid(cfg)
    print(report(cfg))
    if (cfg.check or cfg.claims) and not check(cfg):
        raise SystemExit(1)


if __name__ == "__main__":
    main()

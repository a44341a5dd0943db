"""Every measured number the prose states, computed from the committed records: one place per figure.

    python -m research.figures            # each figure: name, value, what it is
    python -m research.figures --check    # the prose's tagged figures equal these (exit 1 if one does not)

README.md, research/README.md, research/toy/README.md and docs/ write a measured number as

    <!-- fig:NAME -->VALUE<!-- /fig -->

Rendered, the comments vanish and VALUE reads as text; checked (research/tests/test_figures.py runs the
check), VALUE must equal what FIGURES[NAME] computes from the committed records. So a number in
prose cannot drift from its records, and one quantity has one name, and one value, wherever it
is cited. The notebooks print the same figures from code (`value(NAME)`).

"Both settings" below means the two CPU settings every record set was run under (the default
kernels and ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2): a difference counts only
when its paired 95% interval excludes 0 on the same side in both.
"""

from __future__ import annotations

import functools
import json
import math
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass


from research.common import ROOT
from research.lab.report import OUTCOMES, group_runs, is_stuck, mean_ci
from research.cli import parse_config
from nano_respo.sft import ANNEALS, CONVERGED_SHARE
from research.toy.across import record_set

from research.warm_start_stop import WarmStopConfig, band, verdict
from research.drift_figures import FIGURES as DRIFT_FIGURES
from research.mechanism_figures import FIGURES as MECHANISM_FIGURES
from research.rerun_figures import FIGURES as RERUN_FIGURES
from research.reuse_figures import FIGURES as REUSE_FIGURES

SETTINGS = ("default", "avx2")
# The ReSPO of every record read here but the default run's and Study 3's: this project's reconstruction.
RECONSTRUCTION = "respo_wtilt"
# The default run's two settings are a machine's default kernels (the AMD EPYC it was recorded on has AVX-512) and
# ATen's scalar kernels (ATEN_CPU_CAPABILITY=default), which round reductions differently.
DEFAULT_RUN_SETTINGS = ("default", "unvectorised")
BASELINES = ("seq_clip", "grpo", "gspo", "vespo")
PROSE = ("README.md", "research/README.md", "research/toy/README.md", "docs/training.md", "research/bench/README.md")
TAG = re.compile(r"<!-- fig:(\w+) -->(.*?)<!-- /fig -->", re.S)
STUCK_BELOW = 0.1


@functools.cache
def llm(cell: str) -> dict[str, list[dict]]:
    """The tiny-Qwen3 records per CPU setting: 'selected' (each method's selected lr) or 'stress' (all at 3e-4)."""
    name = {"selected": "records.json", "stress": "lr3e-4.json"}[cell]
    return {s: json.loads((ROOT / "research/results" / s / name).read_text()) for s in SETTINGS}


@functools.cache
def toy(lr: str) -> dict[str, list[dict]]:
    """The toy's fresh evaluation per setting: 'protocol' (ReSPO at lr 0.03) or 'equal' (ReSPO at 0.01, the baselines' step)."""
    sets = {}
    for s in SETTINGS:
        paths = [ROOT / f"research/toy/results/eval-fresh-{s}"] + ([ROOT / f"research/toy/results/eval-fresh-{s}-respo_wtilt-lr0.01"]
                                                          if lr == "equal" else [])
        sets[s] = record_set(f"{s}=" + "+".join(map(str, paths)))[1]  # later folders replace whole cells
    return sets


@functools.cache
def default_run() -> dict[str, dict]:
    """`python train.py` with no flags, per setting: its metrics.jsonl records and its warm start's report."""
    out = {}
    for s in DEFAULT_RUN_SETTINGS:
        folder = ROOT / "research/results/default-run" / s
        records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line]
        out[s] = {"records": records, "warm_start": json.loads((folder / "warm_start.json").read_text())}
    return out


def default_evals(which: int, key: str) -> list[float]:
    return [[r for r in run["records"] if r["kind"] == "eval"][which][key] for run in default_run().values()]


def default_off_policy_mean(key: str) -> list[float]:
    """Per setting, the mean of `key` over the default run's off-policy steps (all but each batch's first)."""
    means = []
    for run in default_run().values():
        values = [r[key] for r in run["records"] if r["kind"] == "train" and (r["epoch"], r["minibatch"]) != (0, 0)
                  and r[key] is not None and not math.isnan(r[key])]
        means.append(sum(values) / len(values))
    return means


@functools.cache
def warm_stop() -> tuple[dict, ...]:
    """research/results/warm-start-stop/: one record per warm start (research/WARMSTART.md)."""
    return tuple(json.loads(p.read_text()) for p in sorted((ROOT / "research/results/warm-start-stop").glob("*.json")))


def warm_stop_values(read, model: str | None = None, anneal: str | None = None) -> list:
    return [read(r) for r in warm_stop() if model in (None, r["config"]["model"])
            and anneal in (None, r["config"]["sft_anneal"])]


# The warm starts measured against today's (budget), and a figure key's spelling of a name.
CANDIDATES = tuple(CONVERGED_SHARE)


def name(label: str) -> str:
    return label.replace("-", "_")


def warm_stop_paired(read, candidate: str, ratio: bool = False) -> list[float]:
    """Per (model, setting, seed) measured both ways: read(candidate's record) - (or /) read(today's record)."""
    cells = {(r["config"]["model"], r["cpu_setting"], r["config"]["sft_seed"], r["config"]["sft_anneal"]): r
             for r in warm_stop()}
    return [read(cells[(*cell, candidate)]) / read(record) if ratio else read(cells[(*cell, candidate)]) - read(record)
            for (*cell, anneal), record in sorted(cells.items()) if anneal == "budget" and (*cell, candidate) in cells]


def warm_stop_edge(model: str, candidate: str) -> str:
    """The candidate's pass@1 nearest the edge of `model`'s widened band: its distance inside it, and its cell."""
    margin, pass1 = WarmStopConfig().pass1_margin, lambda r: r["heldout"]["heldout_pass@1"]
    low, high, _ = band(warm_stop_values(lambda r: r, model, "budget"))
    distance, cell = min((min(pass1(r) - (low - margin), high + margin - pass1(r)),
                          f"{r['cpu_setting']} seed {r['config']['sft_seed']}")
                         for r in warm_stop_values(lambda r: r, model, candidate))
    return f"{distance:.4f} ({cell})"


def warm_stop_verdict(model: str, candidate: str) -> str:
    """The rule's outcome for `model` (research/WARMSTART.md), as warm_start_stop.py --summarise prints it."""
    line = next(v for v in verdict(list(warm_stop()), WarmStopConfig())
                if v.startswith(f"{model}: --sft-anneal {candidate}: "))
    return line.split(": ")[2].split(" ")[0] + (f" ({line.split('outside: ')[1]} outside)" if "outside" in line else "")


def by_model(records: list[dict]) -> dict[str, list[dict]]:
    models = defaultdict(list)
    for r in records:
        models[r.get("model", "toy")].append(r)
    return models


def cell_means(sets: dict, key: str, methods=None) -> list[float]:
    """Seed means of `key` for every (setting, model, method, cell) present, nan cells left out."""
    means = []
    for records in sets.values():
        for model_records in by_model(records).values():
            for (method, _), runs in group_runs(model_records).items():
                if methods is None or method in methods:
                    mean, _ = mean_ci([r.get(key, float("nan")) for r in runs.values()])
                    if not math.isnan(mean):
                        means.append(mean)
    return means


def paired(sets: dict, key: str, baseline: str, reference: str = RECONSTRUCTION):
    """{(model, cell): [(mean, half) per setting]} of reference minus baseline on shared seeds."""
    out = defaultdict(list)
    for records in sets.values():
        for model, model_records in by_model(records).items():
            groups = group_runs(model_records)
            for (method, cell), theirs in groups.items():
                ours = groups.get((reference, cell), {})
                seeds = sorted(set(ours) & set(theirs))
                if method == baseline and seeds:
                    out[(model, cell)].append(mean_ci([ours[s][key] - theirs[s][key] for s in seeds]))
    return out


def carried(sets: dict, keys=tuple(k for k, _ in OUTCOMES), baselines=BASELINES):
    """Every (baseline, key, model, cell) whose interval excludes 0 on the same side in both settings."""
    found = []
    for baseline in baselines:
        for key in keys:
            for where, results in paired(sets, key, baseline).items():
                sides = {math.copysign(1, m) if abs(m) > h else 0 for m, h in results}
                if len(results) == len(sets) and len(sides) == 1 and 0 not in sides:
                    found.append((baseline, key, *where, [m for m, _ in results]))
    return found


def span(values, digits: int, unit: str = "", signed: bool = False) -> str:
    lo, hi = min(values), max(values)
    form = f"{{:{'+' if signed else ''}.{digits}f}}"
    a, b = form.format(lo), form.format(hi)
    if a == b:
        return a + unit
    return f"{a} to {b}{unit}" if signed else f"{a}-{b}{unit}"


def percent_span(values, digits: int = 1) -> str:
    return span([100 * v for v in values], digits, "%")


def stuck(sets: dict, method: str) -> str:
    counts = []
    for records in sets.values():
        runs = [r for r in records if r["method"] == method]
        counts.append(f"{sum(is_stuck(r, STUCK_BELOW) for r in runs)}/{len(runs)}")
    return " and ".join(counts)


def first_batch_identical(sets: dict) -> str:
    """Seed groups (setting, model, cell, seed) whose first rollout batch's reward is the same for every method."""
    groups = defaultdict(set)
    for s, records in sets.items():
        for r in records:
            groups[(s, r["model"], r["reuse"], r["lag"], r["seed"])].add(r["reward_curve"][0])
    return f"{sum(len(v) == 1 for v in groups.values())} of {len(groups)}"


def tests_per_setting(sets: dict) -> int:
    """Paired tests one setting's tables make: every baseline x outcome x (model, cell)."""
    records = next(iter(sets.values()))
    cells = {(r["model"], r["reuse"], r["lag"]) for r in records}
    methods = {r["method"] for r in records} - {RECONSTRUCTION}
    return len(cells) * len(methods) * len(OUTCOMES)


def pairs(sets: dict) -> int:
    records = next(iter(sets.values()))
    return min(len(runs) for runs in group_runs([r for r in records if r["model"] == "tiny-qwen3"]).values())


@functools.cache
def gate_records(folder: str) -> tuple[dict, ...]:
    """The records of one gate folder of research/results/ (gate1-amended, gate2-amended, ...)."""
    return tuple(json.loads(p.read_text()) for p in sorted((ROOT / "research/results" / folder).glob("*.json")))


def gate1_passing_shares() -> list[float]:
    """Amendment 1's shares at which gate 1 passed under every CPU setting it ran."""
    outcomes = defaultdict(list)
    for r in gate_records("gate1-amended"):
        outcomes[r["config"]["sft_full_share"]].append((r["cpu_setting"], r["gate"]))
    return sorted(q for q, runs in outcomes.items()
                  if len({setting for setting, _ in runs}) >= 2 and all(gate == "PASS" for _, gate in runs))


def gate1_passing(key: str) -> list[float]:
    return [r[key] for r in gate_records("gate1-amended") if r["config"]["sft_full_share"] in gate1_passing_shares()]


def lr_star() -> str:
    """lr* of the on-policy selection per CPU setting (amendment 1's warm start), as 'lr on setting, ...'."""
    chosen = {p.stem.split("-")[0]: json.loads(p.read_text())["chosen"][RECONSTRUCTION]
              for p in sorted((ROOT / "research/results/lr_select").glob("*-share*.json"))}
    return " and ".join(sorted({f"{lr:g}" for lr in chosen.values()})) + f" ({', '.join(chosen)})"


def gate2_cells(reuse_lag=None) -> list[dict]:
    """Amendment 1's gate 2 records, all or those of one (R, lag)."""
    return [r for r in gate_records("gate2-amended")
            if reuse_lag is None or (r["config"]["reuse"], r["config"]["lag"]) == reuse_lag]


def gate2_pooled(key: str, fallbacks: bool | None = None) -> list[float]:
    """`key` pooled over seeds in each gate 2 record: all, only R = 8 (False) or only the fallbacks (True)."""
    return [r["pooled"][key] for r in gate2_cells()
            if fallbacks is None or fallbacks == ((r["config"]["reuse"], r["config"]["lag"]) != (8, 0))]


def longer_low(record: dict) -> bool:
    """Gate 2's length half: the low-w positives are longer than the high-w ones."""
    return record["pooled"]["len_low_w_pos"] > record["pooled"]["len_high_w_pos"]


def gate2_outcome() -> str:
    """'PASS at (R, lag)' for the first cell passing on every CPU setting, else what the pre-registration says."""
    cells = sorted({(r["config"]["reuse"], r["config"]["lag"]) for r in gate2_cells()})
    for cell in cells:
        runs = gate2_cells(cell)
        if len({r["cpu_setting"] for r in runs}) >= 2 and all(r["gate"] == "PASS" for r in runs):
            return f"passes at R = {cell[0]}, lag {cell[1]}"
    return ("no cell passes on both CPU settings, so by the pre-registered rule the evaluation stops there "
            "(what the gate measured is read again below)")


# --- The three sources of off-policy data (research/offpolicy.py, research/README.md) --------------------

OFFPOLICY_MODELS = {"dense": "tiny-qwen3", "moe": "tiny-qwen3-moe"}
OFFPOLICY_SOURCES = ("mismatch", "reuse", "staleness", "all")
OFFPOLICY_ARMS = (RECONSTRUCTION, "seq_clip", "grpo", "gspo", "grpo_trl_seq_mask", "grpo_verl_token_trunc", "grpo_opsm",
                  "vespo_token_mean")


@functools.cache
def offpolicy_records() -> tuple[dict, ...]:
    """Every committed record of the study, both settings (research/results/offpolicy/<setting>/...)."""
    folder = ROOT / "research/results/offpolicy"
    return tuple(json.loads(p.read_text()) for p in sorted(folder.glob("*/*/*/*.json")))


def offpolicy_runs(model: str, source: str, arm: str = RECONSTRUCTION) -> list[dict]:
    return [r for r in offpolicy_records() if (r["model"], r["source"], r["arm"]) == (OFFPOLICY_MODELS[model], source, arm)]


def offpolicy_values(model: str, source: str, read, arm: str = RECONSTRUCTION) -> list[float]:
    """read(record) over the runs of both settings and every seed, nan and missing left out."""
    values = [read(r) for r in offpolicy_runs(model, source, arm)]
    return [v for v in values if v is not None and not math.isnan(v)]


def offpolicy_span(model, source, read, digits, percent=False, signed=False) -> str:
    values = offpolicy_values(model, source, read)
    if not values:
        return "none"
    return percent_span(values, digits) if percent else span(values, digits, signed=signed)


def reading(key: str):
    return lambda r: r["reading"][key]


def arm_reading(arm: str, key: str = "phi_low_w_pos"):
    return lambda r: r["reading"]["arms"][arm][key]


def run_mean(key: str):
    return lambda r: sum(r[key]) / len(r[key]) if r[key] else None


def every_seed(pairs: list[tuple[float, float]]) -> str:
    """'a > b on every seed' style verdict of paired values (both settings pooled), else 'not resolved'."""
    if not pairs:
        return "not run"
    if all(a > b for a, b in pairs):
        return "higher on every seed"
    if all(a < b for a, b in pairs):
        return "lower on every seed"
    return "not resolved"


def offpolicy_pairs(model: str, read_a, source_a: str, read_b, source_b: str, arm_a=RECONSTRUCTION, arm_b=RECONSTRUCTION):
    """(a, b) per (setting, seed) present in both."""
    b = {(r["setting"], r["seed"]): read_b(r) for r in offpolicy_runs(model, source_b, arm_b)}
    return [(read_a(r), b[(r["setting"], r["seed"])]) for r in offpolicy_runs(model, source_a, arm_a)
            if (r["setting"], r["seed"]) in b and read_a(r) is not None and b[(r["setting"], r["seed"])] is not None
            and not math.isnan(read_a(r)) and not math.isnan(b[(r["setting"], r["seed"])])]


def offpolicy_p3(model: str, source: str) -> str:
    """P3 on every run: a run without low-w or without high-w positives leaves it unresolved."""
    pairs = offpolicy_pairs(model, reading("len_low_w_pos"), source, reading("len_high_w_pos"), source)
    runs = len(offpolicy_runs(model, source))
    if runs and len(pairs) < runs:
        return f"not resolved ({len(pairs)} of {runs} runs have both)"
    return every_seed(pairs)


def offpolicy_p1(model: str) -> str:
    """P1: the bf16 sampler alone keeps log w's 10-90% range inside +-0.1 and fewer positives below 0.8 than reuse."""
    q = offpolicy_values(model, "mismatch", lambda r: max(abs(r["reading"]["log_w_quantiles"][1]),
                                                          abs(r["reading"]["log_w_quantiles"][3])))
    share = offpolicy_pairs(model, reading("low_w_pos_frac"), "mismatch", reading("low_w_pos_frac"), "reuse")
    if not q or not share:
        return "not run"
    return "holds" if max(q) < 0.1 and all(a < b for a, b in share) else "refuted"


def offpolicy_identical(sources=OFFPOLICY_SOURCES) -> str:
    curves = defaultdict(dict)
    for r in offpolicy_records():
        if r["source"] in sources:
            curves[(r["model"], r["source"], r["arm"], r["seed"])][r["setting"]] = r["reward_curve"]
    both = [c for c in curves.values() if len(c) == 2]
    return f"{sum(len({tuple(v) for v in c.values()}) == 1 for c in both)} of {len(both)}"


def offpolicy_p2() -> str:
    """P2: R = 1 sources have log pi/pi_old = 0, the fp32 lag-0 source log pi_old/mu = 0, `all` neither."""
    def largest(r, key):
        return max(abs(q) for q in r["reading"][key])
    zero = {"mismatch": "log_trust_quantiles", "staleness": "log_trust_quantiles", "reuse": "log_rho_quantiles"}
    runs = {s: [r for r in offpolicy_records() if r["source"] == s and r["arm"] == RECONSTRUCTION] for s in OFFPOLICY_SOURCES}
    if not all(runs.values()):
        return "not run"
    holds = (all(largest(r, key) < 1e-5 for s, key in zero.items() for r in runs[s])
             and all(largest(r, "log_trust_quantiles") > 1e-3 and largest(r, "log_rho_quantiles") > 1e-3
                     for r in runs["all"]))
    return "holds" if holds else "fails"


def offpolicy_figures() -> dict:
    figures = {}
    for m in OFFPOLICY_MODELS:
        for s in OFFPOLICY_SOURCES:
            name = f"offpolicy_{m}_{s}"
            figures.update({
                f"{name}_runs": Figure(f"{m}, {s}: {RECONSTRUCTION} runs read (seeds x settings)",
                                       lambda m=m, s=s: len(offpolicy_runs(m, s))),
                f"{name}_logw_q10": Figure(f"{m}, {s}: 10% quantile of log w over a run's off-policy steps, range",
                                           lambda m=m, s=s: offpolicy_span(m, s, lambda r: r["reading"]["log_w_quantiles"][1], 3, signed=True)),
                f"{name}_logw_q90": Figure(f"{m}, {s}: 90% quantile of log w, range",
                                           lambda m=m, s=s: offpolicy_span(m, s, lambda r: r["reading"]["log_w_quantiles"][3], 3, signed=True)),
                f"{name}_ess": Figure(f"{m}, {s}: effective sample share of w per step, run mean, range",
                                      lambda m=m, s=s: offpolicy_span(m, s, reading("ess"), 2)),
                f"{name}_low_w_share": Figure(f"{m}, {s}: share of positives with w < 0.8, range",
                                              lambda m=m, s=s: offpolicy_span(m, s, reading("low_w_pos_frac"), 1, True)),
                f"{name}_len_low": Figure(f"{m}, {s}: mean length of the positives with w < 0.8, range",
                                          lambda m=m, s=s: offpolicy_span(m, s, reading("len_low_w_pos"), 1)),
                f"{name}_len_high": Figure(f"{m}, {s}: mean length of the positives with w > 1.2, range",
                                           lambda m=m, s=s: offpolicy_span(m, s, reading("len_high_w_pos"), 1)),
                f"{name}_len_pos": Figure(f"{m}, {s}: mean length of all positives, range",
                                          lambda m=m, s=s: offpolicy_span(m, s, reading("len_pos"), 1)),
                f"{name}_p3": Figure(f"{m}, {s}: P3, the low-w positives' length against the high-w positives'",
                                     lambda m=m, s=s: offpolicy_p3(m, s)),
                f"{name}_router": Figure(f"{m}, {s}: share of response tokens whose top-k experts differ, sampler "
                                         f"against learner, run mean, range",
                                         lambda m=m, s=s: offpolicy_span(m, s, run_mean("router_mismatch_frac"), 2, True)),
                f"{name}_sampler_kl": Figure(f"{m}, {s}: KL(mu || pi_old) per token, run mean, range",
                                             lambda m=m, s=s: offpolicy_span(m, s, run_mean("sampler_kl"), 4)),
            })
            for arm in OFFPOLICY_ARMS:
                figures[f"{name}_phi_low_{arm}"] = Figure(
                    f"{m}, {s}: mean coefficient {arm} gives a positive with w < 0.8 ({RECONSTRUCTION}'s steps), range",
                    lambda m=m, s=s, arm=arm: offpolicy_span(m, s, arm_reading(arm), 2))
            for arm in (RECONSTRUCTION, "grpo_trl_seq_mask"):
                figures[f"{name}_reward_{arm}"] = Figure(
                    f"{m}, {s}: mean rollout reward of {arm} over the 8 batches, range",
                    lambda m=m, s=s, arm=arm: span([r["mean_reward"] for r in offpolicy_runs(m, s, arm)], 3)
                    if offpolicy_runs(m, s, arm) else "not run")
            figures[f"{name}_reward_verdict"] = Figure(
                f"{m}, {s}: P6, {RECONSTRUCTION}'s mean reward against grpo_trl_seq_mask's on the same seed (both settings)",
                lambda m=m, s=s: every_seed(offpolicy_pairs(m, lambda r: r["mean_reward"], s, lambda r: r["mean_reward"],
                                                            s, RECONSTRUCTION, "grpo_trl_seq_mask")))
        figures[f"offpolicy_{m}_p1"] = Figure(f"{m}: P1, mismatch alone inside +-0.1 and below reuse's low-w share",
                                              lambda m=m: offpolicy_p1(m))
        figures[f"offpolicy_{m}_p5"] = Figure(
            f"{m}: P5, the router mismatch share under all three sources against the bf16 sampler alone",
            lambda m=m: every_seed(offpolicy_pairs(m, run_mean("router_mismatch_frac"), "all",
                                                   run_mean("router_mismatch_frac"), "mismatch")))
    figures["offpolicy_records"] = Figure("records of the study committed (both settings)",
                                          lambda: len(offpolicy_records()))
    figures["offpolicy_minutes"] = Figure("minutes the study's runs took, both settings summed", lambda: f"{sum(r['seconds'] for r in offpolicy_records()) / 60:.0f}")
    figures["offpolicy_p2"] = Figure(f"P2: each source moves only its own factor of w (every {RECONSTRUCTION} run)", offpolicy_p2)
    figures["offpolicy_identical_across_settings"] = Figure(
        "runs (model, source, arm, seed) whose 8 rollout rewards are identical on the two CPU settings, of those run on both",
        offpolicy_identical)
    figures["offpolicy_identical_fp32"] = Figure("the same for the fp32-sampler sources (reuse, staleness)",
                                                 lambda: offpolicy_identical(("reuse", "staleness")))
    figures["offpolicy_identical_bf16"] = Figure("the same for the bf16-sampler sources (mismatch, all)",
                                                 lambda: offpolicy_identical(("mismatch", "all")))
    return figures


# --- research/bench/README.md: the benchmarks' records (research/bench/results/) --------------------------------

@functools.cache
def bench(name: str) -> dict:
    return json.loads((ROOT / "research" / "bench" / "results" / f"{name}.json").read_text())


def median_span(values, digits: int = 2) -> str:
    """median (min, max), as the benchmarks print their ratios."""
    return f"median {statistics.median(values):.{digits}f} (min {min(values):.{digits}f}, max {max(values):.{digits}f})"


def bench_medians(record: dict, names, unit: str = "s", scale: float = 1.0, digits: int = 2) -> str:
    return " / ".join(f"{statistics.median(record['seconds'][n]) * scale:.{digits}f} {unit}" for n in names)


# The variants of step-less-work.json by the flags they had at commit 9561567, where it was recorded (--lean-sampler
# is gone since: its sampler is rollout.decode; --shared-prompts is opt-in).
LESS_WORK = {"ours": "as is (`--shared-prompts --lean-sampler`)", "plain": "`--no-shared-prompts --no-lean-sampler`",
             "packed": "`--packed-forward --no-lean-sampler`", "lean": "`--no-shared-prompts` (the lean sampler alone)",
             "packed+lean": "`--packed-forward` (with the lean sampler)"}


def less_work_ratios(key: str) -> str:
    """Each variant of research/bench/step.py --less-work against TRL (key ratio_to_trl) or against ours as is."""
    record = bench("step-less-work")
    ratios = record["ratio_to_trl"]
    if key == "ours":
        ours = record["seconds"]["ours"]
        return "; ".join(f"{LESS_WORK[n]} {median_span([v / o for v, o in zip(record['seconds'][n], ours)])}"
                         for n in list(LESS_WORK)[1:])
    return "; ".join(f"{LESS_WORK[n]} {median_span(ratios[n])}" for n in LESS_WORK)


def logprobs_table() -> str:
    rows = ["| use | T | logits MB | ours MB | naive MB | peak ours / naive | ours s | naive s | time ours / naive |",
            "|---|---|---|---|---|---|---|---|---|"]
    for row in bench("logprobs")["rows"]:
        ours, naive = row["ours"], row["naive"]
        rows.append(f"| {row['use']} | {row['length']} | {row['logits_mb']:.0f} | {ours['peak'] / 2**20:.0f} | "
                    f"{naive['peak'] / 2**20:.0f} | {ours['peak'] / naive['peak']:.3f} | {ours['seconds']:.2f} | "
                    f"{naive['seconds']:.2f} | {ours['seconds'] / naive['seconds']:.2f} |")
    return "\n".join(rows)


def logprobs_worst(use: str) -> str:
    ratios = [r["ours"]["peak"] / r["naive"]["peak"] for r in bench("logprobs")["rows"] if r["use"] == use]
    return f"{max(ratios):.2f}"


def newcomer_seconds(names) -> str:
    """research/bench/newcomer.py's times (fresh clone, empty cache), as minutes and seconds."""
    seconds = bench("newcomer")["seconds"]
    values = [seconds[n] for n in names]
    total = sum(values)
    return f"{total:.0f} s" if total < 120 else f"{total / 60:.1f} min"


def newcomer_notebook_span() -> str:
    values = sorted(v for n, v in bench("newcomer")["seconds"].items() if n.startswith("notebook"))
    return f"{values[0]:.0f}-{values[-1]:.0f} s"


def newcomer_figures() -> dict:
    figures = {"newcomer_train": Figure("research/bench/newcomer.py: the first `python train.py` of a fresh clone",
                                        lambda: newcomer_seconds(["train"])),
               "newcomer_notebooks": Figure("the same: each notebook's build, the quickest to the slowest",
                                            newcomer_notebook_span),
               "newcomer_pytest": Figure("the same: `python -m pytest -q`", lambda: newcomer_seconds(["pytest -q"])),
               "newcomer_load": Figure("the same: the machine's 1-minute load average before and after",
                                       lambda: "{:.1f} and {:.1f}".format(bench("newcomer")["load_average"]["before"][0],
                                                                          bench("newcomer")["load_average"]["after"][0])),
               "newcomer_all_tiers": Figure("the same: every tier, one after another (what CI's pytest runs)",
                                            lambda: newcomer_seconds(["pytest -q", "tests/step", "tests/run", "tests/course"]))}
    figures.update({f"newcomer_{tier}": Figure(f"the same: `python -m pytest -q tests/{tier}`",
                                               lambda tier=tier: newcomer_seconds([f"tests/{tier}"]))
                    for tier in ("step", "run", "course")})
    return figures


def bench_figures() -> dict:
    def kernel():
        return bench("kernel")

    def step():
        return bench("step")

    def profile():
        return bench("profile_step")

    def shares():
        return sorted(profile()["self_cpu_share"].items(), key=lambda kv: -kv[1])[:3]
    return {
        "bench_kernel_ratio": Figure(f"the loss alone, forward + backward: time of {RECONSTRUCTION} / grpo",
                                     lambda: median_span(kernel()[f"ratio_{RECONSTRUCTION}_grpo"])),
        "bench_kernel_ms": Figure(f"the same: median times of {RECONSTRUCTION} / grpo",
                                  lambda: bench_medians(kernel(), (RECONSTRUCTION, "grpo"), "ms", 1e3, 0)),
        "bench_step_ratio": Figure("one RL step from random init: time of ours / TRL",
                                   lambda: median_span(step()["ratio_to_trl"]["ours"])),
        "bench_step_seconds": Figure("the same: median times of ours / TRL",
                                     lambda: bench_medians(step(), ("ours", "trl"))),
        "bench_step_overhead": Figure("the same run: ours / (its generate call + forward/backward passes)",
                                      lambda: median_span(step()["overhead"])),
        "bench_step_machine": Figure("the CPU the step benchmark's record was made on", lambda: step()["cpu_setting"]),
        "bench_step_ratio_second": Figure("the same benchmark on a second machine: time of ours / TRL",
                                          lambda: median_span(bench("step-amd-avx2")["ratio_to_trl"]["ours"])),
        "bench_step_overhead_second": Figure("the same run: ours / (its generate call + forward/backward passes)",
                                             lambda: median_span(bench("step-amd-avx2")["overhead"])),
        "bench_step_machine_second": Figure("the CPU of that record", lambda: bench("step-amd-avx2")["cpu_setting"]),
        "bench_less_work_trl": Figure("from the warm start, each variant of ours / TRL",
                                      lambda: less_work_ratios("trl")),
        "bench_less_work_ours": Figure("the same run: each variant / ours as is", lambda: less_work_ratios("ours")),
        "bench_less_work_overhead": Figure("the same run: ours as is / its bare parts",
                                           lambda: median_span(bench("step-less-work")["overhead"])),
        "bench_sampler": Figure("rollout.sample against a bare decode loop (seconds, the sampler's overhead)",
                                lambda: f"{profile()['sample_seconds']:.2f} s against {profile()['bare_decode_seconds']:.2f} s "
                                        f"({profile()['sample_seconds'] / profile()['bare_decode_seconds'] - 1:+.0%})"),
        "bench_profile_ops": Figure("the three largest shares of one mini-batch's self CPU time",
                                    lambda: ", ".join(f"`{k}` {v:.0%}" for k, v in shares())),
        "bench_logprobs_table": Figure("research/bench/logprobs.py's table", logprobs_table),
        "bench_logprobs_forward": Figure("peak ours / naive, forward, the worst T", lambda: logprobs_worst("forward (no grad)")),
        "bench_logprobs_train": Figure("peak ours / naive, training (hidden grad), the worst T",
                                       lambda: logprobs_worst("train: hidden grad")),
    }


@dataclass(frozen=True)
class Figure:
    what: str
    compute: object

    def value(self) -> str:
        return str(self.compute())


FIGURES = {
    # `python train.py`, the README's quick start (research/results/default-run/, both settings).
    "default_warm_start": Figure(
        "where the default warm start converged and stopped (step of convergence, steps in all), both settings",
        lambda: " and ".join(sorted({f"converged at step {run['warm_start']['report']['converged_at']} of "
                                     f"{run['warm_start']['report']['steps']}" for run in default_run().values()}))),
    "default_pass1_start": Figure("held-out pass@1 (4 samples, T = 1) where RL starts, range over settings",
                                  lambda: span(default_evals(0, "heldout_pass@1"), 3)),
    "default_pass1_end": Figure("held-out pass@1 after the 40 RL iterations, range over settings",
                                lambda: span(default_evals(-1, "heldout_pass@1"), 3)),
    "default_greedy_start": Figure("held-out greedy accuracy where RL starts, range over settings",
                                   lambda: span(default_evals(0, "heldout_acc"), 3)),
    "default_greedy_end": Figure("held-out greedy accuracy at the end, range over settings",
                                 lambda: span(default_evals(-1, "heldout_acc"), 3)),
    "default_rl_minutes": Figure(
        "minutes of the RL part (sum of iteration_s), range over settings, on the 2-core machine the records name",
        lambda: span([sum(r["iteration_s"] for r in run["records"] if r["kind"] == "time") / 60
                      for run in default_run().values()], 1)),
    "default_low_w_share": Figure(
        "share of positives below w = 0.8 over the default run's off-policy steps, range over settings",
        lambda: percent_span(default_off_policy_mean("low_w_pos_frac"), 2)),
    "default_len_low_w": Figure("mean length of those positives (tokens), range over settings",
                                lambda: span(default_off_policy_mean("len_low_w_pos"), 1)),
    "default_len_pos": Figure("mean length of all positives there, range over settings",
                              lambda: span(default_off_policy_mean("len_pos"), 1)),
    "default_len_high_w": Figure("mean length of the positives above w = 1.2 there (the control), range over settings",
                                 lambda: span(default_off_policy_mean("len_high_w_pos"), 1)),
    "default_high_w_steps": Figure("off-policy steps with any positive above w = 1.2, range over settings",
                                   lambda: span([sum(1 for r in run["records"] if r["kind"] == "train"
                                                     and (r["epoch"], r["minibatch"]) != (0, 0)
                                                     and r["len_high_w_pos"] is not None
                                                     and not math.isnan(r["len_high_w_pos"]))
                                                 for run in default_run().values()], 0)),
    # A shorter warm start (research/WARMSTART.md, research/results/warm-start-stop/).
    "warm_stop_records": Figure("warm starts measured (models x settings x seeds x annealings)",
                                lambda: len(warm_stop())),
    "warm_stop_converged_at": Figure("the step every measured warm start converged at",
                                     lambda: ", ".join(sorted({str(v) for v in warm_stop_values(
                                         lambda r: r["warm_start"]["converged_at"])}))),
    **{f"warm_stop_steps_{name(anneal)}": Figure(f"steps in all under --sft-anneal {anneal}", lambda anneal=anneal: ", ".join(
        sorted({str(v) for v in warm_stop_values(lambda r: r["warm_start"]["steps"], anneal=anneal)})))
       for anneal in ANNEALS},
    **{f"warm_stop_pass1_{name(anneal)}_{name(model)}": Figure(
        f"start-of-RL held-out pass@1 of {model} under --sft-anneal {anneal}, range over settings and seeds",
        lambda anneal=anneal, model=model: span(warm_stop_values(lambda r: r["heldout"]["heldout_pass@1"], model,
                                                                 anneal), 3))
       for anneal in ANNEALS for model in ("tiny-qwen3", "tiny-qwen3-moe")},
    # Seconds are compared within one sitting only: converged's cells alternated with today's, converged-half's
    # ran in a later sitting (research/bench/README.md times it against today's side by side).
    "warm_stop_time_ratio_converged": Figure(
        "warm-start seconds, converged over budget, per model, setting and seed (range)",
        lambda: span(warm_stop_paired(lambda r: r["warm_start"]["seconds"], "converged", ratio=True), 2)),
    **{f"warm_stop_pass1_diff_{name(anneal)}": Figure(
        f"pass@1, {anneal} minus budget, per model, setting and seed (range)",
        lambda anneal=anneal: span(warm_stop_paired(lambda r: r["heldout"]["heldout_pass@1"], anneal), 3, signed=True))
       for anneal in CANDIDATES},
    **{f"warm_stop_pass1_mean_diff_{name(anneal)}": Figure(
        f"pass@1, {anneal} minus budget, mean over the paired cells",
        lambda anneal=anneal: f"{statistics.mean(warm_stop_paired(lambda r: r['heldout']['heldout_pass@1'], anneal)):+.3f}")
       for anneal in CANDIDATES},
    **{f"warm_stop_pass1_lower_{name(anneal)}": Figure(
        f"of those paired cells, how many {anneal} started lower in",
        lambda anneal=anneal: (lambda d: f"{sum(x < 0 for x in d)} of {len(d)}")(
            warm_stop_paired(lambda r: r["heldout"]["heldout_pass@1"], anneal)))
       for anneal in CANDIDATES},
    **{f"warm_stop_edge_{name(anneal)}_{name(model)}": Figure(
        f"{model} under --sft-anneal {anneal}: the pass@1 nearest the widened band's edge, how far inside it",
        lambda anneal=anneal, model=model: warm_stop_edge(model, anneal))
       for anneal in CANDIDATES for model in ("tiny-qwen3", "tiny-qwen3-moe")},
    **{f"warm_stop_greedy_{name(anneal)}": Figure(
        f"start-of-RL held-out greedy accuracy under --sft-anneal {anneal}, every model, setting and seed",
        lambda anneal=anneal: span(warm_stop_values(lambda r: r["heldout"]["heldout_acc"], anneal=anneal), 3))
       for anneal in ANNEALS},
    **{f"warm_stop_verdict_{name(anneal)}_{name(model)}": Figure(
        f"the rule's outcome for {model} under --sft-anneal {anneal}",
        lambda anneal=anneal, model=model: warm_stop_verdict(model, anneal))
       for anneal in CANDIDATES for model in ("tiny-qwen3", "tiny-qwen3-moe")},
    # The tiny Qwen3 on `reverse` (research/README.md's earlier study).
    "llm_low_w_share_selected": Figure(
        "share of positives below w = 0.8 at the selected lrs: range of seed means over every method, cell, model "
        "and setting", lambda: percent_span(cell_means(llm("selected"), "low_w_pos_frac"))),
    "llm_low_w_share_stress": Figure(
        "the same share in the stress cell (every method at lr 3e-4, R = 8)",
        lambda: percent_span(cell_means(llm("stress"), "low_w_pos_frac"))),
    "llm_len_low_w_stress": Figure(
        "mean length (tokens) of the positives below w = 0.8 in the stress cell: range of seed means",
        lambda: span(cell_means(llm("stress"), "len_low_w_pos"), 1)),
    "llm_len_pos_stress": Figure(
        "mean length of all positives in the stress cell: range of seed means",
        lambda: span(cell_means(llm("stress"), "len_pos"), 1)),
    "llm_phi_low_w_stress_seq_clip": Figure(
        "coefficient the sequence clip gives a positive below w = 0.8 in the stress cell (range over settings)",
        lambda: span(cell_means(llm("stress"), "phi_low_w_pos", {"seq_clip"}), 2)),
    "llm_phi_low_w_stress_respo": Figure(
        "coefficient respo_wtilt gives a positive below w = 0.8 in the stress cell (range over settings)",
        lambda: span(cell_means(llm("stress"), "phi_low_w_pos", {RECONSTRUCTION}), 2)),
    "llm_phi_low_w_stress_grpo_gspo": Figure(
        "the same for GRPO and GSPO (per-token or length-normalised ratios, so a low sequence w is rarely clipped)",
        lambda: span(cell_means(llm("stress"), "phi_low_w_pos", {"grpo", "gspo"}), 2)),
    "llm_stuck_stress_seq_clip": Figure(
        "stuck runs (final reward < 0.1) of the sequence clip in the stress cell, default and AVX2",
        lambda: stuck(llm("stress"), "seq_clip")),
    "llm_stress_full_auc_gain": Figure(
        "whole-curve reward, respo_wtilt minus each baseline it beats on both settings in the stress cell",
        lambda: span([m for *_, means in carried(llm("stress"), ("full_auc",)) for m in means], 2, signed=True)),
    "llm_stress_full_auc_beaten": Figure(
        "the baselines whose whole-curve reward respo_wtilt beats on both settings in the stress cell",
        lambda: ", ".join(sorted({c[0] for c in carried(llm("stress"), ("full_auc",))}))),
    "llm_stress_gspo_carried": Figure(
        "differences between respo_wtilt and GSPO in the stress cell that hold on both settings (any outcome)",
        lambda: len(carried(llm("stress"), baselines=("gspo",)))),
    "llm_stress_final_beaten": Figure(
        "the baselines whose final training reward respo_wtilt beats on both settings in the stress cell",
        lambda: ", ".join(sorted({c[0] for c in carried(llm("stress"), ("final_reward",))}))),
    "llm_stress_heldout_beaten": Figure(
        "the baselines whose held-out pass@1 respo_wtilt beats on both settings in the stress cell",
        lambda: ", ".join(sorted({c[0] for c in carried(llm("stress"), ("heldout_reward",))}))),
    "llm_heldout_start": Figure(
        "held-out pass@1 of the warm start where RL begins (range over every run of both settings)",
        lambda: span([r["heldout_start"] for rs in llm("selected").values() for r in rs], 2)),
    "llm_approx_kl_selected": Figure(
        "approx_kl (KL(mu || pi) per token) at the selected lrs, mean over a run's off-policy steps: range of "
        "seed means", lambda: span(cell_means(llm("selected"), "approx_kl"), 3)),
    "llm_zero_var_selected": Figure(
        "share of groups whose rewards are all equal (no signal) at the selected lrs: range of seed means",
        lambda: percent_span(cell_means(llm("selected"), "zero_var_frac"), 0)),
    "llm_selected_gains": Figure(
        "every difference at the selected lrs that holds on both settings (any outcome, cell, model): range",
        lambda: span([m for *_, means in carried(llm("selected")) for m in means], 3, signed=True)),
    "llm_selected_gain_baselines": Figure(
        "the baselines those differences are against",
        lambda: ", ".join(sorted({c[0] for c in carried(llm("selected"))}))),
    "llm_selected_carried_seq_clip_vespo": Figure(
        "differences against the sequence clip or VESPO at the selected lrs that hold on both settings",
        lambda: len(carried(llm("selected"), baselines=("seq_clip", "vespo")))),
    "llm_first_batch_identical": Figure(
        "seed groups whose first batch's reward is identical for every method (early AUC includes that batch)",
        lambda: first_batch_identical(llm("selected"))),
    "llm_pairs": Figure("paired seeds per cell", lambda: pairs(llm("selected"))),
    "llm_min_sign_flip_p": Figure(
        "the smallest two-sided p an exact sign-flip test can give on that many pairs (2 / 2^pairs)",
        lambda: f"{2 / 2 ** pairs(llm('selected')):.4f}"),
    "llm_tests_per_setting": Figure(
        "paired tests the selected-lr tables of one setting make (baselines x outcomes x model-cells)",
        lambda: tests_per_setting(llm("selected"))),
    "llm_holm_first_threshold": Figure(
        "Holm's first threshold at 0.05 over that many tests: 0.05 / tests",
        lambda: f"{0.05 / tests_per_setting(llm('selected')):.5f}"),
    # The toy sequence bandit (research/toy/README.md).
    "toy_low_w_share_respo": Figure(
        "share of respo_wtilt's positives below w = 0.8 on the toy under reuse (range of seed means over R and settings)",
        lambda: percent_span([m for m in cell_means(toy("protocol"), "low_w_pos_frac", {RECONSTRUCTION})], 0)),
    "toy_phi_low_w_respo": Figure(
        "coefficient respo_wtilt gives one of them (range of seed means)",
        lambda: span(cell_means(toy("protocol"), "phi_low_w_pos", {RECONSTRUCTION}), 2)),
    "toy_phi_low_w_seq_clip": Figure(
        "coefficient the sequence clip gives one (range of seed means)",
        lambda: span(cell_means(toy("protocol"), "phi_low_w_pos", {"seq_clip"}), 2)),
    "toy_early_gain_r8_protocol": Figure(
        "early AUC, respo_wtilt (lr 0.03) minus each baseline (at its own lr) at R = 8, where both settings carry it",
        lambda: span([m for b, _, _, cell, means in carried(toy("protocol"), ("early_auc",),
                                                            ("seq_clip", "grpo", "gspo", "cispo", "vespo"))
                      if cell.reuse == 8 for m in means], 2, signed=True)),
    "toy_early_level_r4_equal": Figure(
        "baselines respo_wtilt does NOT beat in early AUC at R = 4 when it runs at their step (lr 0.01)",
        lambda: ", ".join(b for b in ("seq_clip", "grpo", "gspo", "cispo", "vespo")
                          if not any(c[0] == b and c[3].reuse == 4
                                     for c in carried(toy("equal"), ("early_auc",), (b,))))),
    "toy_early_beaten_r8_equal": Figure(
        "baselines respo_wtilt beats in early AUC at R = 8, 16 and 32 alike when it runs at their step (lr 0.01)",
        lambda: ", ".join(b for b in ("seq_clip", "grpo", "gspo", "cispo", "vespo")
                          if {c[3].reuse for c in carried(toy("equal"), ("early_auc",), (b,))} >= {8, 16, 32})),
    "toy_end_vs_grpo_gspo_equal": Figure(
        "end-of-run differences (final or held-out reward) between respo_wtilt at lr 0.01 and GRPO or GSPO that hold on "
        "both settings", lambda: len(carried(toy("equal"), ("final_reward", "heldout_reward"), ("grpo", "gspo")))),
    # digit_sum under amendment 1 of research/PREREGISTRATION.md (research/results/gates.md).
    "digit_sum_gate1_shares": Figure(
        "shares of demonstrations from every target at which gate 1 passed on both settings",
        lambda: ", ".join(f"{q:.0%}" for q in gate1_passing_shares()) or "none"),
    "digit_sum_gate1_success": Figure("per-sample success on the long training targets (t >= 27) there, range",
                                      lambda: span(gate1_passing("success_long"), 3)),
    "digit_sum_gate1_pass8": Figure("pass@8 on the long training targets there, range",
                                    lambda: span(gate1_passing("pass@8_long"), 2)),
    "digit_sum_lr_star": Figure(f"lr* of the on-policy selection ({RECONSTRUCTION} at R = 1), per CPU setting", lr_star),
    "digit_sum_gate2_share_r8": Figure("gate 2: share of positives below w = 0.8 under seq_clip at R = 8, range",
                                       lambda: percent_span(gate2_pooled("low_w_pos_frac", fallbacks=False))),
    "digit_sum_gate2_share_fallbacks": Figure(
        "the same share at the fallbacks (R = 16; R = 8 with lag 8), range over both and the settings",
        lambda: percent_span(gate2_pooled("low_w_pos_frac", fallbacks=True))),
    "digit_sum_gate2_len_low": Figure("mean length of the low-w positives in every gate 2 record (tokens), range",
                                      lambda: span(gate2_pooled("len_low_w_pos"), 1)),
    "digit_sum_gate2_len_high": Figure("mean length of the high-w (w > 1.2) positives in every gate 2 record, range",
                                       lambda: span(gate2_pooled("len_high_w_pos"), 1)),
    "digit_sum_gate2_longer_low": Figure("gate 2 records where the low-w positives are the longer ones, of all",
                                         lambda: f"{sum(map(longer_low, gate2_cells()))} of {len(gate2_cells())}"),
    "digit_sum_gate2_outcome": Figure("gate 2 under amendment 1", gate2_outcome),
    **offpolicy_figures(),
    **bench_figures(),
    **newcomer_figures(),
    **{name: Figure(what, compute) for name, (what, compute) in MECHANISM_FIGURES.items()},
    **{name: Figure(what, compute) for name, (what, compute) in RERUN_FIGURES.items()},
    **{name: Figure(what, compute) for name, (what, compute) in DRIFT_FIGURES.items()},
    **{name: Figure(what, compute) for name, (what, compute) in REUSE_FIGURES.items()},
}


VALUES = ROOT / "research" / "figures.json"


def value(name: str) -> str:
    return FIGURES[name].value()


def all_values() -> dict[str, str]:
    return {name: figure.value() for name, figure in FIGURES.items()}


def stale_values() -> list[str]:
    """research/figures.json (what the course reads without importing research/) where it differs from the
    records: one line, or none."""
    written, values = json.loads(VALUES.read_text()) if VALUES.exists() else {}, all_values()
    stale = sorted(n for n in set(written) | set(values) if written.get(n) != values.get(n))
    return [f"research/figures.json differs from the records at {', '.join(stale[:5])}: "
            f"python -m research.figures --write"] if stale else []


def check(paths=PROSE) -> list[str]:
    """The tagged figures of the prose that differ from the records, or name no figure: one line each."""
    problems = []
    for path in paths:
        text = (ROOT / path).read_text()
        for match in TAG.finditer(text):
            name, written = match.groups()
            line = text.count("\n", 0, match.start()) + 1
            if name not in FIGURES:
                problems.append(f"{path}:{line}: fig:{name} is no figure of research/figures.py")
            elif written != value(name):
                problems.append(f"{path}:{line}: fig:{name} reads {written!r}, the records give {value(name)!r}")
    return problems


@dataclass
class FiguresConfig:
    """The measured figures of the prose, from the committed records."""

    check: bool = False
    """Check every <!-- fig:NAME -->value<!-- /fig --> of README.md, research/README.md, research/toy/README.md, docs/, and research/figures.json (exit 1 on a mismatch)."""
    write: bool = False
    """Write every figure's value to research/figures.json, which the course reads (it never imports research/)."""


def main(argv=None) -> int:
    cfg = parse_config(FiguresConfig, argv, prog="python -m research.figures")
    if cfg.write:
        VALUES.write_text(json.dumps(all_values(), indent=1) + "\n")
        print(f"wrote {VALUES.relative_to(ROOT)}")
        return 0
    if not cfg.check:
        for name, figure in FIGURES.items():
            print(f"{name:38} {figure.value():24} {figure.what}")
        return 0
    problems = check() + stale_values()
    tagged = sum(len(TAG.findall((ROOT / p).read_text())) for p in PROSE)
    print("\n".join(problems) or f"{tagged} tagged figures in {', '.join(PROSE)} match the committed records")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The prose figures of the drift study (research/DRIFT.md), as (what, compute) pairs that research/figures.py
makes Figures of. Every value is read from the records under research/results/drift/ by the study's own rules
(research/drift_rules.py), as a span over the two CPU settings; a cell without records reads "not run"."""

from __future__ import annotations

import functools
import json

from research.common import ROOT
from research.digit_runs import SETTINGS, load, positives_in, retained
from research.drift_rules import (CONTRASTS, LONG_CONTRASTS, METRICS, MOE_CONTRASTS, POPULATED, POST_HOC_CONTRASTS,
                                   across, early, read_all, seeds_ahead)
from research.mechanism_figures import percent, span

RECORDS = ROOT / "research/results/drift"
RERUN = ROOT / "research/results/drift-rerun"  # one evaluation record per setting, rerun by its command with --only
RERUN_NAME = "respo-seed0"
NOT_RUN = "not run"


@functools.cache
def records() -> dict:
    return load(RECORDS)


@functools.cache
def study() -> dict:
    return read_all(records())


def per_setting(cell: str) -> dict:
    return study()["cells"].get(cell, {})


def over_settings(cell: str, read, form, needs=lambda x: True) -> str:
    """form(values): read(x) for each setting's reading x of the cell (both settings, or NOT_RUN)."""
    readings = per_setting(cell)
    if len(readings) < len(SETTINGS) or not all(needs(x) for x in readings.values()):
        return NOT_RUN
    values = [read(readings[s]) for s in SETTINGS]
    return form([v for vs in values for v in (vs if isinstance(vs, list) else [vs])])


def verdict(cell: str, claim: str) -> str:
    readings = per_setting(cell)
    if len(readings) < len(SETTINGS):
        return NOT_RUN
    return across({s: x["verdicts"] for s, x in readings.items()}, claim)


def reads(cell: str, contrast: str, key: str = "contrasts") -> str:
    """How a contrast reads on each setting: one word when both agree."""
    readings = per_setting(cell)
    if len(readings) < len(SETTINGS) or not all(key in x for x in readings.values()):
        return NOT_RUN
    words = {s: readings[s][key][contrast]["reads"] for s in SETTINGS}
    if len(set(words.values())) == 1:
        return f"{words[SETTINGS[0]]} on both settings"
    return ", ".join(f"{s}: {w}" for s, w in words.items())


def populated_bins(x: dict) -> list:
    return list(x["check"]["bins"])


def own_retained(method: str, cell: str = "dense") -> str:
    """The method's retained signal on its own runs, in each bin populated there, range over bins and settings."""
    def read(x):
        runs = list(x["runs"][method].values())
        return [retained(runs, "own", b) for b in populated_bins(x) if positives_in(runs, b) >= POPULATED]
    return over_settings(cell, read, lambda v: span(v, 2))


def contrast_mean(cell: str, name: str, key: str = "contrasts") -> str:
    return over_settings(cell, lambda x: x[key][name]["mean"], lambda v: span(v, 3, signed=True),
                         needs=lambda x: key in x)


def secondary_mean(name: str, metric: str) -> str:
    return over_settings("dense", lambda x: x["contrasts"][name]["secondary"][metric][0],
                         lambda v: span(v, 3, signed=True), needs=lambda x: "contrasts" in x)


def interval_text(mean: float, interval: tuple[float, float]) -> str:
    return f"{mean:+.3f} ({interval[0]:+.3f} to {interval[1]:+.3f})"


def secondary_by_setting(name: str, metric: str) -> str:
    """A secondary reading of a dense contrast on each setting apart: mean (90% interval), never one span over
    settings (two intervals of opposite sign would merge into one that straddles 0)."""
    readings = per_setting("dense")
    if len(readings) < len(SETTINGS) or not all("contrasts" in x for x in readings.values()):
        return NOT_RUN
    return "; ".join(f"{s}: {interval_text(*readings[s]['contrasts'][name]['secondary'][metric])}" for s in SETTINGS)


def tested_by_setting(name: str, key: str = "contrasts") -> str:
    """A tested dense contrast on each setting apart: mean (90% interval), exact p, Holm, seeds where a > b."""
    readings = per_setting("dense")
    if len(readings) < len(SETTINGS) or not all(key in x for x in readings.values()):
        return NOT_RUN
    def one(c):
        p = f"p = {c['p']:.4f}" if c["p"] >= 1e-4 else "p < 0.0001"
        behind = sum(d < 0 for d in c["d"])
        return (f"{interval_text(c['mean'], c['interval'])}, {p}, Holm {'rejects' if c['holm'] else 'does not reject'}, "
                f"{c['a']} ahead on {seeds_ahead(c['d'])} and behind on {behind} of {len(c['d'])} seeds")
    return "; ".join(f"{s}: {one(readings[s][key][name])}" for s in SETTINGS)


def heldout_scale() -> str:
    """Per-method mean held-out `ones` pass@1, range over the methods of the dense and longer cells and both settings."""
    means = [sum(map(METRICS["held-out ones"], runs.values())) / len(runs)
             for cell in ("dense", "longer") for x in per_setting(cell).values() for runs in x["runs"].values()]
    return span(means, 3) if means else NOT_RUN


def recorded_early(setting: str, method: str, seed: int) -> str:
    runs = per_setting("dense").get(setting, {}).get("runs", {})
    return f"{early(runs[method][seed]):.3f}" if seed in runs.get(method, {}) else NOT_RUN


def checks(cell: str) -> str:
    readings = per_setting(cell)
    if len(readings) < len(SETTINGS):
        return NOT_RUN
    passed = {s: readings[s]["check"]["passed"] for s in SETTINGS}
    if all(passed.values()):
        return "passes on both settings"
    return ", ".join(f"{s}: {'passes' if p else 'fails'}" for s, p in passed.items())


def gate(stage: str) -> str:
    found = {s: records().get((s, stage), []) for s in SETTINGS}
    if not all(found.values()):
        return NOT_RUN
    return ", ".join(f"{s}: {found[s][0]['gate']}" for s in SETTINGS)


def rerun(setting: str) -> str:
    """The rerun record against the committed one: identical rollouts, or both early rewards."""
    paths = [folder / setting / "evaluate" / f"{RERUN_NAME}.json" for folder in (RECORDS, RERUN)]
    if not all(p.exists() for p in paths):
        return NOT_RUN
    committed, again = (json.loads(p.read_text()) for p in paths)
    if again["rollouts"] == committed["rollouts"] and again["cells"] == committed["cells"]:
        return f"identical to the committed record (early reward {early(again):.3f})"
    return f"early reward {early(again):.3f} against the committed {early(committed):.3f}"


FIGURES = {
    "drift_lr_star": ("lr* of the default setting's lr stage (respo on-policy), used by every method",
                      lambda: f"{study()['lr']:g}" if study()["lr"] else NOT_RUN),
    "drift_seeds": ("paired seeds of the dense cell, per setting",
                    lambda: over_settings("dense", lambda x: x["seeds"], lambda v: span(v, 0))),
    "drift_check": ("the dense cell's manipulation check", lambda: checks("dense")),
    "drift_check_share": ("seq_clip's positives below w = 0.8, every step of batches 1 on, range over settings",
                          lambda: over_settings("dense", lambda x: x["check"]["low_share"], lambda v: percent(v, 1))),
    "drift_check_deep": ("the paper's diagnostic: seq_clip's positives with log w < -1, range over settings",
                         lambda: over_settings("dense", lambda x: x["check"]["deep_share"], lambda v: percent(v, 1))),
    "drift_check_gap": ("tokens by which the positives below 0.8 are longer than all positives, range over settings",
                        lambda: over_settings("dense", lambda x: x["check"]["gap"], lambda v: span(v, 2, signed=True))),
    "drift_check_gap_low": ("the lower end of that gap's 90% bootstrap interval, range over settings",
                            lambda: over_settings("dense", lambda x: x["check"]["gap_interval"][0],
                                                  lambda v: span(v, 2, signed=True))),
    "drift_check_clip_keeps": ("seq_clip's retained signal per populated length bin, range over bins and settings",
                               lambda: over_settings("dense", lambda x: list(x["check"]["bins"].values()),
                                                     lambda v: span(v, 2))),
    **{f"drift_retained_{m}": (f"{m}'s retained signal on its own runs, populated bins, range over bins and settings",
                               functools.partial(own_retained, m))
       for m in ("seq_clip_lowpos1", "respo", "respo_pos_clip_neg", "grpo", "gspo", "vespo")},
    **{f"drift_{c}_early": (f"{c} ({a} - {b}): mean early-reward difference, range over settings",
                            functools.partial(contrast_mean, "dense", c)) for c, (a, b) in CONTRASTS.items()},
    **{f"drift_{c}_reads": (f"{c}: how Holm's test reads it on each setting", functools.partial(reads, "dense", c))
       for c in CONTRASTS},
    "drift_C2_early_ones": ("C2's difference in early ones success (the long family), each setting apart",
                            lambda: secondary_by_setting("C2", "early ones")),
    "drift_C2_heldout_ones": ("C2's difference in held-out ones pass@1, each setting apart",
                              lambda: secondary_by_setting("C2", "held-out ones")),
    "drift_C6_by_setting": ("C6 (respo - vespo), early reward, each setting apart: the test as the rule reads it",
                            lambda: tested_by_setting("C6")),
    **{f"drift_post_hoc_{c}": (f"post hoc {c} ({a} - {b}), early reward, each setting apart (Holm over the two post-hoc "
                               "contrasts; deciding nothing)", functools.partial(tested_by_setting, c, "post_hoc"))
       for c, (a, b) in POST_HOC_CONTRASTS.items()},
    "drift_clip_lost_low": ("what the clip takes from the low tail (sum of 1 - w over positives below 0.8), per positive, "
                            "range over settings", lambda: over_settings("dense", lambda x: x["check"]["lost_low"],
                                                                        lambda v: span(v, 2))),
    "drift_clip_lost_high": ("what the clip takes from the high tail (positives above 1.2, coefficient 0), per positive, "
                             "range over settings", lambda: over_settings("dense", lambda x: x["check"]["lost_high"],
                                                                         lambda v: span(v, 2))),
    "drift_heldout_ones_scale": ("per-method mean held-out ones pass@1, range over methods, the dense and longer cells "
                                 "and both settings: the scale the +-0.03 tie margin is read on", heldout_scale),
    "drift_seq_clip_seed5_early_default": ("seq_clip-seed5's recorded early reward on the default setting (the record an "
                                           "audit reran on an AVX2 host)",
                                           lambda: recorded_early("default", "seq_clip", 5)),
    "drift_C2_final": ("C2's mean difference in final reward, range over settings",
                       lambda: secondary_mean("C2", "final")),
    "drift_dose_p": ("dose-response: one-sided permutation p, range over settings",
                     lambda: over_settings("dense", lambda x: x["dose_p"], lambda v: span(v, 4),
                                           needs=lambda x: "dose_p" in x)),
    **{f"drift_{k}": (f"the dense cell's verdict on {k} across both settings", functools.partial(verdict, "dense", k))
       for k in ("M", "R", "U")},
    **{f"drift_rerun_{s}": (f"{RERUN_NAME} rerun from its command on the {s} setting, against its record",
                            functools.partial(rerun, s)) for s in SETTINGS},
    "drift_moe_gate1": ("the MoE's gate 1 per setting", lambda: gate("moe-gate1")),
    "drift_moe_check": ("the MoE cell's manipulation check", lambda: checks("MoE")),
    **{f"drift_moe_{c}_early": (f"MoE {c}: mean early-reward difference, range over settings",
                                functools.partial(contrast_mean, "MoE", c)) for c in MOE_CONTRASTS},
    **{f"drift_moe_{k}": (f"the MoE cell's verdict on {k} across both settings", functools.partial(verdict, "MoE", k))
       for k in ("M", "R", "U")},
    "drift_long_check": ("the longer cell's manipulation check", lambda: checks("longer")),
    **{f"drift_long_{c}_{metric}": (f"longer cell {c} ({a} - {b}): mean {metric} difference, range over settings",
                                    functools.partial(contrast_mean, "longer", c, key))
       for c, (a, b) in LONG_CONTRASTS.items() for metric, key in (("final", "final"), ("heldout", "held-out"))},
    **{f"drift_long_{c}_{metric}_reads": (f"longer cell {c}, {metric}: how Holm reads it on each setting",
                                          functools.partial(reads, "longer", c, key))
       for c in LONG_CONTRASTS for metric, key in (("final", "final"), ("heldout", "held-out"))},
}

"""Every research script that the docs name (python -m research.<script>), checked as
tests/run/test_documented_commands.py checks the reference's: its documented arguments parse with the parser the
script itself uses (research.cli's, which takes the studies' list flags; train.main's for research.train), the
cheap ones run here shortened, the rest are run, shortened, by the test named in RUN_BY."""

import importlib

import pytest

from research.cli import parse_config
from tests.conftest import parse_train
from tests.run.test_documented_commands import DOCS as REFERENCE_DOCS
from tests.run.test_documented_commands import check_command, documented_commands, script_and_args

DOCS = [*REFERENCE_DOCS, "research/README.md", "research/bench/README.md", "research/toy/README.md"]


def config_of(module: str, name: str):
    """The parser of a study's config (imported when a command is checked)."""
    return lambda args: parse_config(getattr(importlib.import_module(module), name), args)


# Each script's parser: its documented arguments must parse with it.
CONFIGS = {
    "research.train": parse_train,  # as train.main parses them; the study rows are registered by importing research
    "research.toy.run": config_of("research.toy.run", "RunConfig"),
    "research.toy.across": config_of("research.toy.across", "AcrossConfig"),
    "research.toy.select": config_of("research.toy.select", "SelectConfig"),
    "research.toy.stuck": config_of("research.toy.stuck", "StuckConfig"),
    "research.run": config_of("research.run", "ExperimentConfig"),
    "research.across": config_of("research.across", "AcrossConfig"),
    "research.select_lr": config_of("research.select_lr", "SelectConfig"),
    "research.figures": config_of("research.figures", "FiguresConfig"),
    "research.offpolicy": config_of("research.offpolicy", "OffPolicyConfig"),
    "research.warm_start_stop": config_of("research.warm_start_stop", "WarmStopConfig"),
    "research.reread": config_of("research.reread", "RereadConfig"),
    "research.conflict": config_of("research.conflict", "ConflictConfig"),
    "research.default_run": config_of("research.default_run", "DefaultRunConfig"),
    "research.drift": config_of("research.drift", "DriftConfig"),
    "research.reuse": config_of("research.reuse", "ReuseConfig"),
    "research.table": config_of("research.table", "TableConfig"),
}
# Scripts this file runs, each with the flags that make it cheap (appended: argparse keeps the last value).
SHORTENED = {
    "research.bench.kernel": ["--batch", "8", "--length", "16", "--repeats", "1"],
    "research.bench.profile_step": ["--prompts", "2", "--group-size", "2", "--max-new-tokens", "4", "--repeats", "1"],
    "research.bench.logprobs": ["--lengths", "16", "--vocab", "256", "--hidden", "16", "--repeats", "1"],
    "research.bench.gpu": [],  # --dry-run and the tiny CPU smoke are cheap; on a GPU, see research/bench/README.md
    "research.warm_start_stop": [],  # --summarise reads the committed records; a warm start is measured by hand
    "research.toy.select": ["--methods", "respo_wtilt", "grpo", "--reuse", "4", "--seeds", "0", "--lr-grid", "0.01",
                            "0.03", "--respo-grid", "0,0.1,3,2", "0,0,3,2", "--iterations", "2", "--out", "{tmp}"],
}
# Scripts run (shortened) by another test, and what runs them.
RUN_BY = {
    "research.toy.run": "research/tests/test_toy_runner.py",
    "research.toy.across": "research/tests/test_report.py",
    "research.toy.stuck": "research/tests/test_toy_stuck.py",
    # The grid scripts launch many train.py runs: their parts (the cells' commands, the check
    # against committed records, the choice of learning rate) are run there on small inputs.
    "research.run": "research/tests/test_experiments.py",
    "research.across": "research/tests/test_experiments.py",
    "research.select_lr": "research/tests/test_experiments.py",
    "research.figures": "research/tests/test_figures.py",  # --check over the prose
    "research.offpolicy": "research/tests/test_offpolicy.py",
    "research.reread": "research/tests/test_reread.py",  # its reading of the committed dumps, its commands
    "research.conflict": "research/tests/test_conflict.py",  # every stage's runs and rule, on made-up records
    "research.drift": "research/tests/test_drift.py",  # its stages' runs, one tiny run, every rule
    "research.reuse": "research/tests/test_reuse.py",  # its stages' runs, one tiny run, every rule, --summarise
    "research.table": "research/tests/test_table.py",  # its stages' runs, two tiny runs, every rule, --summarise
    "research.rerun": "research/tests/test_rerun.py",  # on made-up records (a real rerun takes minutes)
    "research.default_run": "research/tests/test_default_run_record.py",  # one iteration of it
    "research.bench.newcomer": "research/tests/test_benchmarks.py",  # one step of a fresh clone
    "research.bench.train_check": "research/tests/test_train_check.py",  # its --cpu-smoke (a GPU runs the rest)
    "research.bench.step": None,  # TRL in .venv-bench (research/bench/README.md): here its flags are checked with --help
}
# Arguments that name what an earlier documented command writes, and a committed file of that kind.
STAND_INS = {"mine=runs/check/records.json": "mine=research/results/default/lr3e-4.json"}

COMMANDS = [(doc, command) for doc, command in documented_commands(DOCS)
            if script_and_args(command)[0].startswith("research.")]


def test_the_docs_name_research_scripts_of_every_kind():
    scripts = {script_and_args(command)[0] for _, command in COMMANDS}
    assert {"research.run", "research.drift", "research.figures", "research.toy.run", "research.bench.kernel"} <= scripts


@pytest.mark.parametrize("doc, command", COMMANDS, ids=[f"{d}: {c[:60]}" for d, c in COMMANDS])
def test_every_documented_research_command_is_checked(doc, command, model_cache, tmp_path):
    check_command(doc, command, tmp_path, CONFIGS, SHORTENED, RUN_BY, STAND_INS)

"""Every command that README.md and the docs name, checked here, so that none can rot unseen.

Each documented command is found by reading the markdown (code blocks and `inline code`);
its arguments must parse with the script's own parser (a renamed flag fails), and then:
the cheap ones run here with shortened flags; sweeps and runs that need a GPU, the hub or
another environment are run, shortened, by the test named for their script in RUN_BY.
A documented command whose script has no entry fails, naming it.
"""

import importlib
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from nano_respo.run.cli import parse_config  # noqa: E402
from nano_respo.config import TrainConfig  # noqa: E402
from nano_respo.run.evaluate_cli import EvalConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", "RESULTS.md", "docs/math.md", "docs/training.md", "docs/scaling.md", "bench/README.md",
        "toy/RESULTS.md", "nano_respo/integrations/README.md"]
PROGRAMS = ("python", "python3", ".venv-bench/bin/python", "torchrun", "bash", "jupyter")
# Each script's config class: its documented arguments must parse with it.
CONFIGS = {
    "train.py": lambda: TrainConfig,
    "eval.py": lambda: EvalConfig,
    "toy.run": lambda: importlib.import_module("toy.run").RunConfig,
    "toy.across": lambda: importlib.import_module("toy.across").AcrossConfig,
    "toy.select": lambda: importlib.import_module("toy.select").SelectConfig,
    "toy.stuck": lambda: importlib.import_module("toy.stuck").StuckConfig,
    "experiments/run.py": lambda: script_module("experiments/run.py").ExperimentConfig,
    "experiments/across.py": lambda: script_module("experiments/across.py").AcrossConfig,
    "experiments/select_lr.py": lambda: script_module("experiments/select_lr.py").SelectConfig,
    "experiments/figures.py": lambda: script_module("experiments/figures.py").FiguresConfig,
    "experiments/offpolicy.py": lambda: script_module("experiments/offpolicy.py").OffPolicyConfig,
    "experiments/warm_start_stop.py": lambda: script_module("experiments/warm_start_stop.py").WarmStopConfig,
    "experiments/reread.py": lambda: script_module("experiments/reread.py").RereadConfig,
    "experiments/conflict.py": lambda: script_module("experiments/conflict.py").ConflictConfig,
    "experiments/default_run.py": lambda: script_module("experiments/default_run.py").DefaultRunConfig,
    "experiments/drift.py": lambda: script_module("experiments/drift.py").DriftConfig,
}
# Scripts this file runs, each with the flags that make it cheap (appended: argparse keeps the last value).
SHORTENED = {
    "bench/kernel.py": ["--batch", "8", "--length", "16", "--repeats", "1"],
    "bench/profile_step.py": ["--prompts", "2", "--group-size", "2", "--max-new-tokens", "4", "--repeats", "1"],
    "bench/logprobs.py": ["--lengths", "16", "--vocab", "256", "--hidden", "16", "--repeats", "1"],
    "bench/gpu.py": [],  # --dry-run and the tiny CPU smoke are cheap; on a GPU, see below
    "tools/step_lines.py": [],
    "docs/make_figures.py": ["--out", "{tmp}/phi.png"],  # never over the committed figure
    "experiments/warm_start_stop.py": [],  # --summarise reads the committed records; a warm start is measured by hand
    "toy.select": ["--methods", "respo_wtilt", "grpo", "--reuse", "4", "--seeds", "0", "--lr-grid", "0.01", "0.03",
                   "--respo-grid", "0,0.1,3,2", "0,0,3,2", "--iterations", "2", "--out", "{tmp}"],
}
# Scripts run (shortened) by another test, or by CI itself, and what runs them.
RUN_BY = {
    "train.py": "tests/run/test_commands_after_a_default_run.py",  # the default run and every --help example
    "eval.py": "tests/run/test_commands_after_a_default_run.py",
    "toy.run": "tests/step/test_toy.py",
    "toy.across": "tests/step/test_report.py",
    "toy.stuck": "tests/step/test_toy_stuck.py",
    # The grid scripts launch many train.py runs: their parts (the cells' commands, the check
    # against committed records, the choice of learning rate) are run there on small inputs.
    "experiments/run.py": "tests/course/test_experiments.py",
    "experiments/across.py": "tests/course/test_experiments.py",
    "experiments/select_lr.py": "tests/course/test_experiments.py",
    "experiments/figures.py": "tests/course/test_figures.py",  # --check over the prose
    "tools/course_length.py": "tests/course/test_course_length.py",  # the table and its --check
    "experiments/offpolicy.py": "tests/course/test_offpolicy.py",
    "experiments/reread.py": "tests/course/test_reread.py",  # its reading of the committed dumps, its commands
    "experiments/conflict.py": "tests/course/test_conflict.py",  # every stage's runs and rule, on made-up records
    "experiments/drift.py": "tests/course/test_drift.py",  # its stages' runs, one tiny run, every rule
    "tools/mutation_check.py": "tests/course/test_mutation_check.py",
    "tools/ship_warm_starts.py": "tests/conftest.py",  # retrains each from its manifest (tests/run/test_shipped_warm_starts.py)
    "experiments/default_run.py": "tests/run/test_default_run_record.py",  # one iteration of it
    "bench/newcomer.py": "tests/run/test_benchmarks.py",  # one step of a fresh clone
    "pytest": ".ci/run",
    ".ci/integrations.sh": ".ci/run",
    "examples/trl_respo.py": "tests_integrations/test_examples.py",  # TRL: the integrations' environment
    "examples/verl_respo.sh": "tests_integrations/test_examples.py",
    "bench/step.py": None,  # TRL in .venv-bench (bench/README.md): here its flags are checked with --help only
    "notebooks/": "tests/course/test_notebooks.py",  # jupyter lab notebooks/: every notebook is executed there
    "notebooks/build.py": "tests/course/test_notebooks.py",  # its execute() runs every notebook there
    "venv": None, "--version": None,  # setting up Python itself
}


# Arguments that name what an earlier documented command writes, and a committed file of that kind.
STAND_INS = {"mine=runs/check/records.json": "mine=experiments/results/default/lr3e-4.json"}


def script_module(path: str):
    """experiments/x.py as the package module experiments.x."""
    return importlib.import_module(path.removesuffix(".py").replace("/", "."))


def commands_in(text: str) -> list[str]:
    """The commands of a markdown text: code-block lines (continuations joined) and inline code spans."""
    found, blocks = [], re.findall(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S)
    for block in blocks:
        found += [line.strip() for line in block.replace("\\\n", " ").splitlines()]
    without_blocks = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    found += re.findall(r"^ {4,}(\S.*)$", without_blocks, re.M)  # indented code blocks
    found += [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", without_blocks)]
    found = [re.sub(r"^(\w+=\S+\s+)+", "", c) for c in found]  # environment settings before the command
    return [c for c in found if c.split(" ", 1)[0] in PROGRAMS and " " in c and not c.startswith("python -c")]


def documented_commands() -> list[tuple[str, str]]:
    return sorted({(doc, command) for doc in DOCS for command in commands_in((ROOT / doc).read_text())})


def script_and_args(command: str) -> tuple[str, list[str]]:
    """('train.py', its arguments) of one command line; shell setup before && is dropped."""
    command = re.sub(r"\$\(seq (\d+) (\d+)\)", lambda m: " ".join(map(str, range(int(m[1]), int(m[2]) + 1))),
                     command.split("&&")[0])
    words = []
    for word in shlex.split(command.replace("<the same arguments>", ""), comments=True):
        if word == "..." and words[-1].startswith("--"):  # `--claims ...`: a flag whose values the prose elides
            words.pop()
        elif word != "...":
            words.append(STAND_INS.get(word, word))
    if words[0] == "jupyter":
        return words[2], words[3:]
    if words[0] == "torchrun":
        words = words[[w.endswith(".py") for w in words].index(True) - 1:]
    if words[1] == "-m":
        return words[2], words[3:]
    return words[1], words[2:]


def is_module(script: str) -> bool:
    return "/" not in script and not script.endswith(".py") and "." in script


COMMANDS = documented_commands()


def test_the_docs_name_commands_of_every_kind():
    scripts = {script_and_args(command)[0] for _, command in COMMANDS}
    assert {"train.py", "eval.py", "toy.run", "experiments/run.py", "bench/kernel.py", "tools/mutation_check.py",
            "pytest"} <= scripts


@pytest.mark.parametrize("doc, command", COMMANDS, ids=[f"{d}: {c[:60]}" for d, c in COMMANDS])
def test_every_documented_command_is_checked(doc, command, model_cache, tmp_path):
    script, args = script_and_args(command)
    assert script in CONFIGS or script in SHORTENED or script in RUN_BY, \
        f"{doc} names `{command}`: add its script {script!r} to tests/run/test_documented_commands.py"
    if script in CONFIGS:
        cls = CONFIGS[script]()
        try:
            parse_config(cls, args)
        except SystemExit as stop:  # --help and --help-all exit 0 once they have printed
            if stop.code != 0 or not {"--help", "--help-all"} & set(args):
                pytest.fail(f"{doc}: `{command}` does not parse ({stop})")
    if script in SHORTENED:
        run = ["-m", script] if is_module(script) else [script]
        shortened = [arg.replace("{tmp}", str(tmp_path)) for arg in SHORTENED[script]]
        if script == "bench/gpu.py" and not {"--device", "--cpu-smoke"} & set(args):  # the measurement needs CUDA:
            shortened.append("--dry-run")  # here its flags, shapes and counts are checked on the meta device
        if "--record" in args:  # a shortened run never overwrites the committed record it names
            shortened += ["--record", str(tmp_path / "record.json")]
        done = subprocess.run([sys.executable, *run, *args, *shortened], cwd=ROOT, capture_output=True,
                              text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert done.returncode == 0, f"{doc}: `{command}` failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        assert done.stdout.strip()
    if script == "bench/step.py":
        done = subprocess.run([sys.executable, script, *args, "--help"], cwd=ROOT, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0 and "--repeats" in done.stdout, done.stderr
    runner = RUN_BY.get(script)
    if runner:
        assert (ROOT / runner).exists(), f"{runner} (which runs {script}) is missing"
        needle = script if is_module(script) else Path(script).stem
        assert needle in (ROOT / runner).read_text(), f"{runner} does not run {script}"

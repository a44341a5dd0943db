"""Every command that README.md and the docs name, checked here (the research wing's scripts by
research/tests/test_documented_commands.py, which reads these docs too), so that none can rot unseen.

Each documented command is found by reading the markdown (code blocks and `inline code`);
its arguments must parse as the script itself parses them (a renamed flag fails), and then:
the cheap ones run here with shortened flags; sweeps and runs that need a GPU, the hub or
another environment are run, shortened, by the test named for their script in RUN_BY.
A documented command whose script has no entry fails, naming it.
"""

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from eval import EvalConfig  # noqa: E402
from nano_respo.cli import parse_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", "docs/math.md", "docs/training.md", "docs/scaling.md", "nano_respo/integrations/README.md"]
PROGRAMS = ("python", "python3", ".venv-bench/bin/python", "torchrun", "bash", "jupyter")


def parse_train_py(args: list[str]):
    """As train.main parses them (tests/conftest.py; imported here, where the tiers' conftest is on the path)."""
    from conftest import parse_train
    return parse_train(args)


# Each script's parser: its documented arguments must parse with it.
CONFIGS = {
    "train.py": parse_train_py,
    "eval.py": lambda args: parse_config(EvalConfig, args),
}
# Scripts this file runs, each with the flags that make it cheap (appended: argparse keeps the last value).
SHORTENED = {
    "tools/step_lines.py": [],
    "docs/make_figures.py": ["--out", "{tmp}/phi.png"],  # never over the committed figure
}
# The research wing's scripts (python -m research.<script>) named here are checked, the same way, by
RESEARCH_CHECK = "research/tests/test_documented_commands.py"
# Scripts run (shortened) by another test, or by CI itself, and what runs them.
RUN_BY = {
    "train.py": "tests/run/test_commands_after_a_default_run.py",  # the default run and every --help example
    "eval.py": "tests/run/test_commands_after_a_default_run.py",
    "tools/course_length.py": ".ci/run",  # advisory: CI prints its table
    "tools/mutation_check.py": "tests/course/test_mutation_check.py",
    "tools/ship_warm_starts.py": "tests/conftest.py",  # retrains each from its manifest (tests/run/test_shipped_warm_starts.py)
    "pytest": ".ci/run",
    ".ci/integrations.sh": ".ci/run",
    "examples/own_loop.py": "tests/step/test_own_loop_example.py",  # and checks that it learns
    "examples/trl_respo.py": "tests/integrations/test_examples.py",  # TRL: the integrations' environment
    "examples/verl_respo.sh": "tests/integrations/test_examples.py",
    "notebooks/": "tests/course/test_notebooks.py",  # jupyter lab notebooks/: every notebook is executed there
    "notebooks/build.py": "tests/course/test_notebooks.py",  # its execute() runs every notebook there
    "venv": None, "--version": None,  # setting up Python itself
}


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


def documented_commands(docs=DOCS) -> list[tuple[str, str]]:
    return sorted({(doc, command) for doc in docs for command in commands_in((ROOT / doc).read_text())})


def script_and_args(command: str, stand_ins: dict | None = None) -> tuple[str, list[str]]:
    """('train.py', its arguments) of one command line; shell setup before && and what follows a pipe or a
    redirection (`2>&1 | tee log`) are dropped; `stand_ins` replaces an argument that names what an earlier
    documented command writes with a committed file of that kind."""
    stand_ins = stand_ins or {}
    command = re.sub(r"\$\(seq (\d+) (\d+)\)", lambda m: " ".join(map(str, range(int(m[1]), int(m[2]) + 1))),
                     command.split("&&")[0].split(" | ")[0])
    words = []
    for word in shlex.split(command.replace("<the same arguments>", ""), comments=True):
        if word == "..." and words[-1].startswith("--"):  # `--claims ...`: a flag whose values the prose elides
            words.pop()
        elif re.fullmatch(r"\d*>&?\S*", word):  # 2>&1, > log
            continue
        elif word != "...":
            words.append(stand_ins.get(word, word))
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

# One execution per identical command in a session: the same script with the same arguments (a test's tmp folder
# read as {tmp}), from the same folder, in the same environment (but for the names below) runs once; every test
# that runs it again reads that run's real output (research/tests/test_benchmarks.py shares it too).
RUNS: dict[tuple, tuple[subprocess.CompletedProcess, float]] = {}
PER_TEST = {"PYTEST_CURRENT_TEST", "NANO_RESPO_CACHE"}  # the test's name; the private cache each module is given


def run_once(argv: list[str], timeout: float, tmp_path: Path | None = None) -> subprocess.CompletedProcess:
    """`python <argv>` from the clone's root with OMP_NUM_THREADS=1, output captured: the first identical
    command's run, if this session had one (a timeout shorter than that run took raises as the run would have)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    key = (tuple(arg.replace(str(tmp_path), "{tmp}") if tmp_path else arg for arg in argv),
           tuple(sorted((k, v) for k, v in env.items() if k not in PER_TEST)))
    if key not in RUNS:
        started = time.perf_counter()
        done = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                              env=env)
        RUNS[key] = done, time.perf_counter() - started
    done, seconds = RUNS[key]
    if seconds > timeout:
        raise subprocess.TimeoutExpired([sys.executable, *argv], timeout)
    return done


def test_the_docs_name_commands_of_every_kind():
    scripts = {script_and_args(command)[0] for _, command in COMMANDS}
    assert {"train.py", "eval.py", "tools/mutation_check.py", "pytest"} <= scripts


def check_command(doc, command, tmp_path, configs, shortened, run_by, stand_ins=None):
    """The documented command parses with its script's config, runs shortened, or is run by the test named for it."""
    script, args = script_and_args(command, stand_ins)
    assert script in configs or script in shortened or script in run_by, \
        f"{doc} names `{command}`: add its script {script!r} to the tables of the test that checks {doc}"
    if script in configs:
        try:
            configs[script](args)
        except SystemExit as stop:  # --help and --help-all exit 0 once they have printed
            if stop.code != 0 or not {"--help", "--help-all"} & set(args):
                pytest.fail(f"{doc}: `{command}` does not parse ({stop})")
    if script in shortened:
        run = ["-m", script] if is_module(script) else [script]
        extra = [arg.replace("{tmp}", str(tmp_path)) for arg in shortened[script]]
        if script == "research.bench.gpu" and not {"--device", "--cpu-smoke", "--dry-run"} & set(args):  # the
            extra.append("--dry-run")  # measurement needs CUDA: here its flags, shapes and counts are checked on meta
        if "--record" in args:  # a shortened run never overwrites the committed record it names
            extra += ["--record", str(tmp_path / "record.json")]
        done = run_once([*run, *args, *extra], timeout=600, tmp_path=tmp_path)
        assert done.returncode == 0, f"{doc}: `{command}` failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        assert done.stdout.strip()
    if script == "research.bench.step":
        done = subprocess.run([sys.executable, "-m", script, *args, "--help"], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0 and "--repeats" in done.stdout, done.stderr
    runner = run_by.get(script)
    if runner:
        assert (ROOT / runner).exists(), f"{runner} (which runs {script}) is missing"
        needle = script.rsplit(".", 1)[-1] if is_module(script) else Path(script).stem  # research.drift: drift
        assert needle in (ROOT / runner).read_text(), f"{runner} does not run {script}"


@pytest.mark.parametrize("doc, command", COMMANDS, ids=[f"{d}: {c[:60]}" for d, c in COMMANDS])
def test_every_documented_command_is_checked(doc, command, model_cache, tmp_path):
    script, _ = script_and_args(command)
    if script.startswith("research."):  # the research wing's scripts are imported only by its own tests
        assert "import DOCS as REFERENCE_DOCS" in (ROOT / RESEARCH_CHECK).read_text(), f"{RESEARCH_CHECK} skips {doc}"
        return
    check_command(doc, command, tmp_path, CONFIGS, SHORTENED, RUN_BY)

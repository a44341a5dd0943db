"""The reading path of one RL step and the rooms of the package: what tools/step_lines.py follows, the line
budgets, and the imports.

A reader who starts at the trainer's step must never be led into FSDP code, the faster routes (scale/) or
the off-policy machinery (offpolicy.py): the step reads the plain forms (rollout.decode, policy_logprobs),
which the faster routes are tested against, and receives a route as an argument; a default single-device
run imports the two routes on by default and nothing else of them; and no module of the package may import
one that imports it back.
"""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

from step_lines import Walker, default_run, span  # noqa: E402

# Line budgets (lines as tools/step_lines.py counts them; a file's lines as `wc -l` does): the default step no
# longer, and in no more files, than before the two wings (a034ad5: 695 lines in 8 files by
# this tool's count of what a default `python train.py` calls, the two routes of scale/ it takes in place of the
# plain forms, and the §6 diagnostics, now in nano_respo/diagnostics.py so that kernel.py holds the loss alone),
# and kernel.py at most about 420 lines (563 before). Growing either says why here.
DEFAULT_STEP, DEFAULT_STEP_FILES = 695, 8  # what `python tools/step_lines.py --default` reaches
KERNEL, ROLLOUT, ANY_SOURCE = 420, 220, 600


def reached(method: str, roots=("trainer.rl_iteration",), executed=None) -> set[str]:
    walker = Walker(ROOT, method, executed)
    walker.run(list(roots))
    return {f"{module}.{name}" for module, name in walker.reached}


def test_the_step_reaches_sampler_kernel_and_update_but_no_fsdp_code():
    names = reached("respo")
    for needed in ("nano_respo.rollout.sample", "nano_respo.rollout.decode", "nano_respo.kernel.policy_loss",
                   "nano_respo.kernel.group_advantages", "nano_respo.trainer.rl_step",
                   "nano_respo.kernel.respo_coefficient"):
        assert needed in names
    assert not any(name.startswith(("nano_respo.scale", "nano_respo.lab", "nano_respo.run")) for name in names)


def test_a_default_run_reaches_its_two_routes_and_no_off_policy_code_and_stays_in_its_budget():
    """--default: one iteration of a default `python train.py` is run with the routes it takes, walked from the
    step and from those routes, and only what it calls is counted."""
    executed, routes = default_run(ROOT)
    assert routes == ["scale.shared_prompts.shared_prompt_policy_logprobs", "scale.lean_sampler.decode_lean"]
    walker = Walker(ROOT, "respo", executed)
    walker.run(["trainer.rl_iteration", *routes])
    names = {f"{module}.{name}" for module, name in walker.reached}
    assert {"nano_respo.kernel.policy_loss", "nano_respo.trainer.rl_step", "nano_respo.scale.lean_sampler.decode_lean",
            "nano_respo.scale.shared_prompts.pack_shared"} <= names
    assert not {"nano_respo.rollout.decode", "nano_respo.rollout.policy_logprobs"} & names  # the plain forms
    assert not any(name.startswith("nano_respo.offpolicy") for name in names)
    scale_files = {module for module, _ in walker.reached if module.startswith("nano_respo.scale")}
    assert scale_files <= {"nano_respo.scale.shared_prompts", "nano_respo.scale.lean_sampler",
                           "nano_respo.scale.packed"}  # packed: helpers the shared route reuses
    assert "nano_respo.kernel.decoupled_coefficients" not in names  # the correction's branch is not taken
    total = sum(span(node, methods_apart=True) for node in walker.reached.values())  # as the tool totals it
    assert total <= DEFAULT_STEP, f"the default step is {total} lines, over its budget of {DEFAULT_STEP}"
    assert len({module for module, _ in walker.reached}) <= DEFAULT_STEP_FILES  # files a reader opens


def test_the_systems_routes_and_the_off_policy_code_are_the_runs_choice_not_the_steps():
    """--packed-forward, --shared-prompts, --lean-sampler and the off-policy sources reach the step as arguments
    (run.session.routes, run.session.off_policy_of); started from them, the walk finds them."""
    names = reached("respo")
    assert not any(name.startswith("nano_respo.scale") for name in names)
    with_routes = reached("respo", ["trainer.rl_iteration", "scale.lean_sampler.decode_lean",
                                    "scale.packed.packed_policy_logprobs",
                                    "scale.shared_prompts.shared_prompt_policy_logprobs"])
    assert {"nano_respo.scale.packed.pack", "nano_respo.scale.packed.first_fit", "nano_respo.rollout.unpacked",
            "nano_respo.scale.shared_prompts.pack_shared"} <= with_routes
    # Statically, the step's `off_policy` argument names OffPolicy: its methods are followed from there.
    assert {"nano_respo.offpolicy.OffPolicy.prepare", "nano_respo.offpolicy.learner_logprobs"} <= names


def test_a_method_table_is_followed_along_one_row_unless_all_are_asked_for():
    respo, every = reached("respo"), reached("all")
    assert "nano_respo.kernel.sapo_coefficient" not in respo
    assert {"nano_respo.kernel.sapo_coefficient", "nano_respo.kernel.clip_coefficient"} <= every
    assert reached("seq_clip") - respo == {"nano_respo.kernel.clip_coefficient"}


def test_the_files_stay_within_their_budgets():
    lines = {path: len(path.read_text().splitlines()) for path in (ROOT / "nano_respo").rglob("*.py")}
    assert lines[ROOT / "nano_respo" / "kernel.py"] <= KERNEL
    assert lines[ROOT / "nano_respo" / "rollout.py"] <= ROLLOUT
    over = {str(p.relative_to(ROOT)): n for p, n in lines.items() if n > ANY_SOURCE}
    assert not over, f"over {ANY_SOURCE} lines: {over}"


def test_scale_says_which_routes_a_default_run_takes_and_where_their_plain_forms_are():
    from nano_respo import rollout, scale
    from nano_respo.config import TrainConfig
    from nano_respo.run.session import routes

    sentences = " ".join(scale.__doc__.split()).split(". ")
    default_run = next(s for s in sentences if s.startswith("A default single-device run"))
    plain_forms = next(s for s in sentences if s.startswith("The plain references"))
    _, rl_logprobs, decoder = routes(TrainConfig())
    for route, plain in ((rl_logprobs, rollout.policy_logprobs), (decoder, rollout.decode)):
        assert route.__module__.startswith("nano_respo.scale."), route.__module__
        module = route.__module__.rpartition(".")[2]
        assert f"{module}.py" in default_run, module
        assert plain.__name__ in plain_forms and f"--no-{module.replace('_', '-')}" in plain_forms, module


def package_imports() -> dict[str, set[str]]:
    """Every import of the package by the package: module level, inside functions and under TYPE_CHECKING."""
    modules = {}
    for path in (ROOT / "nano_respo").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
                found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def test_no_module_of_the_package_imports_one_that_imports_it_back():
    graph = package_imports()
    assert "nano_respo.run.session" in graph["nano_respo.run.loop"]  # the walk sees real imports

    def cycle_from(start, path):
        for nxt in sorted(graph[path[-1]]):
            if nxt == start:
                return path + [nxt]
            if nxt not in path and (found := cycle_from(start, path + [nxt])):
                return found
        return None
    cycles = [c for c in (cycle_from(m, [m]) for m in graph) if c]
    assert not cycles, "import cycle: " + " -> ".join(cycles[0])
    assert not graph["nano_respo.kernel"]  # the kernel imports torch only
    assert not any(m.startswith("nano_respo.trainer") for m in graph["nano_respo.run.session"])


def test_the_step_and_its_config_stand_below_the_run_machinery():
    """The step (trainer.py) imports nothing of run/ (the loop, run/loop.py, imports the step), and the configs
    import nothing of the warm start (sft.py reads its --sft-anneal choices from config.py)."""
    graph = package_imports()
    assert "nano_respo.trainer" in graph["nano_respo.run.loop"]
    assert not any(m.startswith("nano_respo.run") for m in graph["nano_respo.trainer"])
    assert "nano_respo.config" in graph["nano_respo.sft"]
    assert "nano_respo.sft" not in graph["nano_respo.config"]


def test_importing_the_trainer_leaves_fsdp_unimported():
    code = "import sys, nano_respo.trainer; print('torch.distributed.fsdp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


def test_a_default_single_device_run_imports_its_two_routes_and_no_scale_out_off_policy_or_lab_code(tmp_path):
    """train.py's whole single-device path (config, session, trainer) and one default iteration import the two
    routes on by default (scale.shared_prompts, scale.lean_sampler) and nothing else of scale/, offpolicy.py or
    lab/; with both routes off (the plain forms) none of them; a flag that needs one imports it."""
    # The answer goes to a file, not a pipe: a helper process that an import may start (multiprocessing's
    # resource tracker) inherits the child's pipes and would keep them open after the child exits.
    answer = tmp_path / "imported.txt"
    code = ("import sys, torch, nano_respo.config, nano_respo.run.session as s, nano_respo.trainer; "
            "from nano_respo.config import TrainConfig; "
            "s.routes(TrainConfig()); s.off_policy_of(TrainConfig(), torch.nn.Linear(1, 1), None); "
            f"open({str(answer)!r}, 'w').write(repr(sorted(m for m in sys.modules "
            "if m.startswith(('nano_respo.scale', 'nano_respo.lab', 'nano_respo.offpolicy')))))")
    subprocess.run([sys.executable, "-c", code], stdout=subprocess.DEVNULL, check=True, cwd=ROOT, timeout=300)
    assert answer.read_text() == ("['nano_respo.scale', 'nano_respo.scale.lean_sampler', 'nano_respo.scale.packed', "
                                  "'nano_respo.scale.shared_prompts']")  # packed: helpers the shared route reuses
    code = code.replace("s.routes(TrainConfig())", "s.routes(TrainConfig(shared_prompts=False, lean_sampler=False))")
    subprocess.run([sys.executable, "-c", code], stdout=subprocess.DEVNULL, check=True, cwd=ROOT, timeout=300)
    assert answer.read_text() == "[]"
    lagged = code.replace("off_policy_of(TrainConfig()", "off_policy_of(TrainConfig(lag=1)")
    subprocess.run([sys.executable, "-c", lagged], stdout=subprocess.DEVNULL, check=True, cwd=ROOT, timeout=300)
    assert answer.read_text() == "['nano_respo.offpolicy']"

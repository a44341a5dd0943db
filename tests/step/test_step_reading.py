"""What a default run imports, and how the package's modules import each other.

A reader who follows a default `python train.py` must never be led into FSDP code, the opt-in routes (scale/) or
the off-policy machinery (offpolicy.py): a default single-device run imports none of them and runs the plain
forms (rollout.decode, rollout.policy_logprobs) that the routes are tested against; a flag that needs one imports
it. The package stands below train.py and eval.py (it never imports them), and no module of it imports one that
imports it back. How long the reading path is, an advisory script in tools/ reports; it is advice, not a test.
"""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOT_DEFAULT = ("nano_respo.scale", "nano_respo.offpolicy")  # scale.distributed: the FSDP code

# A tiny default single-device run, in process (default routes, method and sampler; small sizes, no warm start),
# then the modules it imported that a default run must not. The answer goes to a file, not a pipe: a helper process
# that an import may start (multiprocessing's resource tracker) inherits the child's pipes.
TINY_DEFAULT_RUN = r'''
import sys
import train
from nano_respo.cli import from_flat
cfg = from_flat(train.TrainConfig, dict(task="addition", sft_steps=0, iterations=1, prompts_per_iteration=4,
                                        group_size=2, reuse=2, max_new_tokens=8, eval_problems=8, eval_samples=2,
                                        plots=False, out_dir=sys.argv[1], device="cpu"))
run_dir = train.train(cfg)
assert (run_dir / "latest").is_file()
open(sys.argv[2], "w").write(repr(sorted(m for m in sys.modules if m.startswith({not_default!r}))))
'''


def test_a_tiny_default_run_imports_no_route_and_no_off_policy_code(tmp_path, model_cache):
    answer = tmp_path / "imported.txt"
    subprocess.run([sys.executable, "-c", TINY_DEFAULT_RUN.format(not_default=NOT_DEFAULT), str(tmp_path / "runs"),
                    str(answer)], stdout=subprocess.DEVNULL, check=True, cwd=ROOT, timeout=600)
    assert answer.read_text() == "[]"


# What set-up decides from the flags alone: the routes (train.routes_of) and the off-policy sources
# (train.off_policy_of), then the modules loaded.
ROUTES_OF = r'''
import sys, torch, train
from nano_respo.cli import from_flat
cfg = from_flat(train.TrainConfig, dict({flags}))
train.routes_of(cfg.routes), train.off_policy_of(cfg, torch.nn.Linear(1, 1))
print(sorted(m for m in sys.modules if m.startswith({not_default!r})))
'''


def modules_for(flags: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", ROUTES_OF.format(flags=flags, not_default=NOT_DEFAULT)],
                          capture_output=True, text=True, check=True, cwd=ROOT, timeout=300)
    return eval(done.stdout.strip().splitlines()[-1])


def test_the_default_takes_the_plain_forms_and_a_flag_that_needs_a_route_imports_it():
    from nano_respo import rollout
    from train import TrainConfig, routes_of

    assert routes_of(TrainConfig().routes) == (rollout.policy_logprobs, rollout.policy_logprobs)
    assert modules_for("") == []
    assert modules_for("packed_forward=True") == ["nano_respo.scale", "nano_respo.scale.packed"]
    assert "nano_respo.scale.shared_prompts" in modules_for("shared_prompts=True")
    assert "nano_respo.scale.logprobs" in modules_for("logprob_chunk_mb=16")
    assert modules_for("lag=1") == ["nano_respo.offpolicy"]


def package_imports() -> dict[str, set[str]]:
    """Every import of the package by the package (module level, inside functions and under TYPE_CHECKING); the
    entry points train.py and eval.py are nodes of the graph too."""
    modules = {"train": ROOT / "train.py", "eval": ROOT / "eval.py"}
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


def test_no_module_imports_one_that_imports_it_back_and_the_package_never_imports_the_entry_points():
    graph = package_imports()
    assert {"nano_respo.kernel", "nano_respo.rollout", "nano_respo.runs"} <= graph["train"]  # it sees real imports
    assert "train" in graph["eval"]  # eval.py falls back to train.py's defaults

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
    importers = {name for name, imported in graph.items() if imported & {"train", "eval"}}
    assert importers == {"eval"}, f"the package imports an entry point: {importers - {'eval'}}"


def test_importing_train_leaves_fsdp_and_transformers_unimported():
    """(Loading a model imports torch's FSDP through transformers; train.py itself does not.)"""
    code = ("import sys, train; "
            "print(sorted(m for m in ('torch.distributed.fsdp', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"

"""Count what a reader follows through one RL step: definitions reached from the trainer, statically.

    python tools/step_lines.py                                   # from trainer.rl_iteration
    python tools/step_lines.py trainer.collect_rollouts trainer.rl_step   # from other roots
    python tools/step_lines.py --method all                      # every row of the method table
    python tools/step_lines.py --root <checkout> ...             # another checkout of the repo
    python tools/step_lines.py --default                         # what a default `python train.py` step calls

Starting from the given functions of the package, it follows with `ast` every name a
reached definition uses that resolves to a definition of the package: functions and
classes called or referenced (a config named in a parameter's annotation counts: the
reader looks it up), module-level tables they read, `module.name`, `self.method`,
`Class.method` (an autograd Function's `apply`: its forward and backward), and a method
called on a parameter whose annotation or default value is of a package class.
A class counts its own body (fields, docstrings); each method counts once it is called,
`__init__` / `__post_init__` once the class is. A table keyed by method names (a dict
literal with a key equal to --method) counts all its lines but is followed along the row of
that method only, as a reader looks up one row (--method all follows every row). Nothing is
run and nothing outside the package (torch, transformers) is followed, except with --default:
then one iteration of rl_iteration is run first as a default `python train.py` runs it (a tiny
random-init model, TrainConfig's defaults with fewer prompts and tokens, and the routes
run.session.routes gives them: scale.shared_prompts' training forward and scale.lean_sampler's
decode loop, which the step receives as arguments and which are walked from as roots too), and
a function it never called is not followed (the plain forms rollout.decode and policy_logprobs,
and the branches a flag turns on, such as the decoupled correction, drop out; tables and
classes a called function reads still count). Prints each
definition reached with its file, lines, line count and code-line count (docstrings,
comments and blank lines left out), then the totals; a reached module named `distributed`
is flagged.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
from pathlib import Path

PACKAGE = "nano_respo"
CONSTRUCTORS = ("__init__", "__post_init__")


class Module:
    def __init__(self, name: str, path: Path):
        self.name, self.path = name, path
        text = path.read_text()
        self.tree = ast.parse(text)
        self.source_lines = text.splitlines()
        self.defs: dict[str, ast.AST] = {}       # top-level functions, classes, assignments
        self.imports: dict[str, tuple] = {}      # local alias -> (module, name or None for a module)
        # Imports under `if TYPE_CHECKING:` name what an annotation means, so they resolve too.
        typing_only = [inner for node in self.tree.body if isinstance(node, ast.If)
                       and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING" for inner in node.body]
        for node in self.tree.body + typing_only:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.defs[node.name] = node
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(target, ast.Name):
                        self.defs[target.id] = node
            elif isinstance(node, ast.ImportFrom):
                base = self.resolve_from(node)
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = (base, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith(PACKAGE):
                        self.imports[alias.asname or alias.name] = (alias.name, None)

    def resolve_from(self, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        parts = self.name.split(".")[:-node.level]
        return ".".join(parts + ([node.module] if node.module else []))


class Walker:
    def __init__(self, root: Path, method: str = "all", executed: set[tuple[str, int]] | None = None):
        self.method = method
        self.executed = executed  # (file, first line) of every function a run executed; None: follow all
        self.modules: dict[str, Module] = {}
        for path in sorted((root / PACKAGE).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            self.modules[name] = Module(name, path)
        self.root = root
        self.reached: dict[tuple[str, str], ast.AST] = {}  # (module, qualified name) -> node
        self.todo: list[tuple[Module, str, ast.AST]] = []

    # -- resolution -------------------------------------------------------------------
    def lookup(self, module: Module, name: str):
        """(module, top-level name) that `name` means in `module`, or None outside the package."""
        if name in module.defs:
            return module, name
        if name in module.imports:
            target, attr = module.imports[name]
            if attr is None:
                return None
            if f"{target}.{attr}" in self.modules:  # `from . import trainer`: a module, not a definition
                return None
            if target in self.modules:
                return self.lookup(self.modules[target], attr)
        return None

    def module_alias(self, module: Module, name: str) -> Module | None:
        if name in module.imports:
            target, attr = module.imports[name]
            full = target if attr is None else f"{target}.{attr}"
            return self.modules.get(full)
        return None

    def class_of(self, module: Module, expr: ast.AST | None):
        """The package class an annotation or a default value names (X, X | None, or an instance X())."""
        if expr is None:
            return None
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            expr = ast.parse(expr.value, mode="eval").body
        if isinstance(expr, ast.BinOp):  # X | None
            return self.class_of(module, expr.left) or self.class_of(module, expr.right)
        if isinstance(expr, ast.Name):
            found = self.lookup(module, expr.id)
            if found is None:
                return None
            owner, name = found
            node = owner.defs[name]
            if isinstance(node, ast.ClassDef):
                return owner, node
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):  # ONE = OneProcess()
                return self.class_of(owner, node.value.func)
        return None

    # -- reaching ---------------------------------------------------------------------
    def reach(self, module: Module, qualname: str, node: ast.AST) -> None:
        key = (module.name, qualname)
        if self.executed is not None and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            path = str(module.path.relative_to(self.root))
            if not any((path, line) in self.executed for line in [node.lineno, *(d.lineno for d in node.decorator_list)]):
                return  # a function the run never called
        if key not in self.reached:
            self.reached[key] = node
            self.todo.append((module, qualname, node))

    def reach_name(self, module: Module, name: str, called: bool) -> None:
        found = self.lookup(module, name)
        if found is None:
            return
        owner, top = found
        node = owner.defs[top]
        self.reach(owner, top, node)
        if called and isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name in CONSTRUCTORS:
                    self.reach(owner, f"{top}.{item.name}", item)

    def reach_method(self, owner: Module, cls: ast.ClassDef, attr: str) -> None:
        self.reach(owner, cls.name, cls)
        for item in cls.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == attr:
                self.reach(owner, f"{cls.name}.{attr}", item)

    def visit(self, module: Module, qualname: str, node: ast.AST) -> None:
        typed: dict[str, tuple] = {}  # parameter -> (module, class) from its annotation or default
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            positional = args.posonlyargs + args.args
            defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
            left_out = self.hooks_left_out(node)
            for arg, default in [*zip(positional, defaults), *zip(args.kwonlyargs, args.kw_defaults)]:
                if arg.annotation is not None and id(arg.annotation) in left_out:
                    continue
                cls = self.class_of(module, arg.annotation) or self.class_of(module, default)
                if cls:
                    typed[arg.arg] = cls
            if "." in qualname:  # a method: self is its class
                owner_name = qualname.split(".")[0]
                typed["self"] = (module, module.defs[owner_name])
        body = node.body if isinstance(node, ast.ClassDef) else [node]
        row = self.method_row(node)
        if row is not None:
            body = [row]
        if isinstance(node, ast.ClassDef):  # the class's own lines; its methods are reached one by one
            body = [item for item in node.body if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))]
            body += node.bases + node.decorator_list
        called = {id(n.func) for part in body for n in ast.walk(part) if isinstance(n, ast.Call)}
        unused = self.hooks_left_out(node)
        for part in body:
            for sub in ast.walk(part):
                if id(sub) in unused:
                    continue
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
                    self.reach_name(module, sub.id, id(sub) in called)
                elif isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name):
                    alias = self.module_alias(module, sub.value.id)
                    cls = self.class_of(module, sub.value)
                    if alias is not None and sub.attr in alias.defs:
                        self.reach_name(alias, sub.attr, id(sub) in called)
                    elif sub.value.id in typed:
                        self.reach_method(*typed[sub.value.id], sub.attr)
                    elif cls is not None:  # Class.method; an autograd Function's apply runs forward and backward
                        for attr in ("forward", "backward") if sub.attr == "apply" else (sub.attr,):
                            self.reach_method(*cls, attr)

    def hooks_left_out(self, node: ast.AST) -> set[int]:
        """With --default: the annotation nodes of parameters that default to None (a hook such as `off_policy`
        that a default run does not pass), so the class they name is not counted; else nothing."""
        if self.executed is None or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return set()
        args = node.args
        positional = args.posonlyargs + args.args
        defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
        return {id(n) for arg, default in [*zip(positional, defaults), *zip(args.kwonlyargs, args.kw_defaults)]
                if isinstance(default, ast.Constant) and default.value is None and arg.annotation is not None
                for n in ast.walk(arg.annotation)}

    def method_row(self, node: ast.AST) -> ast.AST | None:
        """The value of the --method row when node is a table keyed by method names, else None."""
        if self.method == "all" or not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Dict):
            return None
        for key, value in zip(node.value.keys, node.value.values):
            if isinstance(key, ast.Constant) and key.value == self.method:
                return value
        return None

    def run(self, roots: list[str]) -> None:
        for root in roots:
            module_name, _, name = root.rpartition(".")
            module = self.modules[f"{PACKAGE}.{module_name}"]
            if name not in module.defs:
                raise SystemExit(f"{root}: no such definition in {module.path}")
            self.reach(module, name, module.defs[name])
        while self.todo:
            self.visit(*self.todo.pop())


# One RL iteration of a default `python train.py` (TrainConfig's defaults with fewer prompts and tokens, a random-init
# tiny Qwen3 on the default task, the routes run.session.routes picks for them): the package functions it calls, as
# (file, first line), and the routes, as module.function of the package.
DEFAULT_RUN = """
import functools, json, os, sys, tempfile
os.environ["NANO_RESPO_CACHE"] = tempfile.mkdtemp()
import torch
from nano_respo.config import TrainConfig
from nano_respo.models import load_model
from nano_respo.run.session import build_task, routes
from nano_respo.trainer import rl_iteration
torch.manual_seed(0)
cfg = TrainConfig(prompts_per_iteration=4, group_size=4, max_new_tokens=8, eval_problems=8)
model, tokenizer = load_model(cfg.model, cfg.dtype, "cpu")
task = build_task(cfg)
_, logprobs, decoder = routes(cfg)
optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
package = os.path.join(sys.argv[1], "nano_respo")
called = set()
def profile(frame, event, arg):
    if event == "call" and frame.f_code.co_filename.startswith(package):
        called.add((os.path.relpath(frame.f_code.co_filename, sys.argv[1]), frame.f_code.co_firstlineno))
sys.setprofile(profile)
rl_iteration(model, tokenizer, task, optimizer, cfg, 0, 0, logprobs, decoder=decoder)
sys.setprofile(None)
named = [route.func if isinstance(route, functools.partial) else route for route in (logprobs, decoder)]
print(json.dumps({"called": sorted(called),
                  "routes": [f"{f.__module__.removeprefix('nano_respo.')}.{f.__qualname__}" for f in named]}))
"""


def default_run(root: Path) -> tuple[set[tuple[str, int]], list[str]]:
    """(the package functions one iteration of a default `python train.py` calls, the routes it takes as
    module.function): DEFAULT_RUN, in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    out = subprocess.run([sys.executable, "-c", DEFAULT_RUN, str(root)], capture_output=True, text=True, env=env,
                         check=True, cwd=root)
    found = json.loads(out.stdout.splitlines()[-1])
    return {(path, line) for path, line in found["called"]}, found["routes"]


def code_lines(module: Module, node: ast.AST) -> int:
    """Lines of a definition that are code: no docstring, comment-only or blank line (methods apart)."""
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    lines = set(range(first, node.end_lineno + 1))
    parts = [node]
    if isinstance(node, ast.ClassDef):
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines -= set(range(item.lineno - len(item.decorator_list), item.end_lineno + 1))
        parts = [item for item in node.body if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for part in parts:
        for sub in ast.walk(part):
            if isinstance(sub, ast.Expr) and isinstance(sub.value, ast.Constant) and isinstance(sub.value.value, str):
                lines -= set(range(sub.lineno, sub.end_lineno + 1))
    source = module.source_lines
    return sum(1 for n in lines if source[n - 1].strip() and not source[n - 1].strip().startswith("#"))


def span(node: ast.AST, methods_apart: bool) -> int:
    """Lines of a definition (decorators included); a class without the methods counted on their own."""
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    lines = node.end_lineno - first + 1
    if methods_apart and isinstance(node, ast.ClassDef):
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines -= span(item, False)
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("roots", nargs="*", default=["trainer.rl_iteration"],
                        help="module.function of the package to start from")
    parser.add_argument("--method", default="respo",
                        help="the row a reader follows in tables keyed by method (all: every row)")
    parser.add_argument("--root", default=str(Path(__file__).resolve().parents[1]), help="the checkout to read")
    parser.add_argument("--default", action="store_true",
                        help="only the functions one iteration of a default `python train.py` calls, the routes it "
                             "takes among them (it runs one)")
    args = parser.parse_args(argv)
    root = Path(args.root).resolve()
    executed, route_roots = default_run(root) if args.default else (None, [])
    roots = args.roots + [route for route in route_roots if route not in args.roots]
    walker = Walker(root, args.method, executed)
    walker.run(roots)
    rows = []
    for (module_name, qualname), node in walker.reached.items():
        module = walker.modules[module_name]
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        rows.append((str(module.path.relative_to(walker.root)), first, node.end_lineno, qualname,
                     span(node, methods_apart=True), code_lines(module, node)))
    rows.sort()
    per_file: dict[str, list[int]] = {}
    print("lines  code  definition")
    for path, first, last, qualname, lines, code in rows:
        print(f"{lines:5d} {code:5d}  {path}:{first}-{last}  {qualname}")
        per_file.setdefault(path, [0, 0])
        per_file[path][0] += lines
        per_file[path][1] += code
    print()
    for path, (lines, code) in sorted(per_file.items(), key=lambda kv: -kv[1][0]):
        flag = "   <- FSDP code" if Path(path).stem == "distributed" else ""
        print(f"{lines:5d} {code:5d}  {path}{flag}")
    total, total_code = (sum(v[i] for v in per_file.values()) for i in (0, 1))
    print(f"\n{total} lines ({total_code} of code: no docstrings, comments or blank lines) in {len(rows)} "
          f"definitions, {len(per_file)} files (from {', '.join(roots)}; method tables: {args.method}"
          f"{'; the functions a default run calls' if args.default else ''})")


if __name__ == "__main__":
    main()

"""What a reader walks from `python train.py` to kernel.policy_loss on the default path, in lines. Advisory: it prints.

    python tools/step_lines.py

train.py is counted whole (a reader reads it top to bottom). Then one RL iteration runs as a default
`python train.py` runs it (TrainConfig's defaults with fewer prompts and tokens, a random-init tiny Qwen3 on
the default task, the training forward routes_of gives, no off-policy source), and every function or method
of the package that the iteration calls is counted, each with its whole definition (decorators, docstring and
comments included): rollout.sample and decode, policy_logprobs, kernel.policy_loss and what it calls, the
diagnostics. Last, the length of `python train.py --help` and the package's lines (with and without scale/
and integrations/, the systems routes and the other trainers' adapters).
"""

import argparse
import ast
import contextlib
import io
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "nano_respo"


def called_in_one_iteration() -> set[tuple[Path, int]]:
    """(file, first line) of every package function one default iteration calls."""
    os.environ.setdefault("NANO_RESPO_CACHE", tempfile.mkdtemp())  # nothing is trained or cached here
    sys.path.insert(0, str(ROOT))
    import torch
    from transformers.utils import logging

    import train
    from nano_respo.models import load_model
    from nano_respo.tasks import make_task

    logging.disable_progress_bar()
    torch.manual_seed(0)
    cfg = train.TrainConfig(prompts_per_iteration=4, group_size=4, max_new_tokens=8, eval_problems=8)
    task = make_task(cfg.task, cfg.task_size, cfg.eval_problems, cfg.heldout_file, seed=0)
    model, tokenizer = load_model(cfg.model, cfg.dtype, "cpu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    called = set()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(str(PACKAGE)):
            called.add((Path(frame.f_code.co_filename), frame.f_code.co_firstlineno))
    sys.setprofile(profile)
    with contextlib.redirect_stdout(io.StringIO()):  # a random-init model's batch: its notes are not the point
        train.rl_iteration(model, tokenizer, task, optimizer, cfg, 0, 0, logprobs=train.routes_of(cfg.routes)[1],
                           off_policy=train.off_policy_of(cfg, model))
    sys.setprofile(None)
    return called


def definitions(text: str) -> dict[int, tuple[str, int, int]]:
    """Each top-level function and method of a source: first line (the def's) -> (name, first, last line)."""
    found = {}
    for node in ast.parse(text).body:
        inner = [m for m in node.body if isinstance(m, ast.FunctionDef)] if isinstance(node, ast.ClassDef) else [node]
        for f in inner:
            if isinstance(f, ast.FunctionDef):
                first = min([f.lineno] + [d.lineno for d in f.decorator_list])
                name = f"{node.name}.{f.name}" if f is not node else f.name
                for line in {f.lineno, first}:  # a profiled code object starts at its first decorator
                    found[line] = (name, first, f.end_lineno)
    return found


def lines_of(path: Path) -> int:
    return len(path.read_text().splitlines())


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--default", action="store_true", help=argparse.SUPPRESS)  # the old flag, now always so
    parser.parse_args(argv)
    texts = {path: path.read_text() for path in PACKAGE.rglob("*.py")}  # as imported, should a file change meanwhile
    rows = {}
    for path, line in called_in_one_iteration():
        definition = definitions(texts[path]).get(line)  # None: a nested function, counted with the one around it
        if definition:
            rows[(path.relative_to(ROOT).as_posix(), definition[1])] = definition
    per_file = {"train.py": lines_of(ROOT / "train.py")}
    print(f"{per_file['train.py']:5d}  train.py (whole)")
    for (path, first), (name, _, last) in sorted(rows.items()):
        print(f"{last - first + 1:5d}  {path}:{first}-{last}  {name}")
        per_file[path] = per_file.get(path, 0) + last - first + 1
    print()
    for path, lines in per_file.items():
        print(f"{lines:5d}  {path}")
    print(f"{sum(per_file.values()):5d}  lines from `python train.py` to kernel.policy_loss on the default path: "
          f"train.py and {len(rows)} functions in {len(per_file) - 1} other files")
    help_text = subprocess.run([sys.executable, "train.py", "--help"], cwd=ROOT, capture_output=True, text=True,
                               check=True, env={**os.environ, "COLUMNS": "100"}).stdout
    print(f"{len(help_text.splitlines()):5d}  lines of `python train.py --help`")
    files = sorted(PACKAGE.rglob("*.py"))
    total = sum(map(lines_of, files))
    apart = {part: sum(lines_of(p) for p in files if p.relative_to(PACKAGE).parts[0] == part)
             for part in ("scale", "integrations")}
    print(f"{total:5d}  lines of nano_respo/ ({len(files)} .py files); "
          + ", ".join(f"{lines} in {part}/" for part, lines in apart.items())
          + f"; {total - sum(apart.values())} without them")


if __name__ == "__main__":
    main()

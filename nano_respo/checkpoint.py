"""Atomic, self-checking checkpoints: a complete directory appears under its final name, or not at all.

    runs/<name>/checkpoints/iter-000040/   model + tokenizer (save_pretrained), trainer_state.pt,
                                           checkpoint.json (weight dtype, every file's size)
    runs/<name>/checkpoints/iter-000040/dcp/   FSDP runs only: every rank's model and optimizer shards
    runs/<name>/latest                     "checkpoints/iter-000040", replaced with os.replace

Each checkpoint is written into a temporary directory and renamed; `latest` is switched
only after that. A kill at any moment leaves `latest` pointing at a complete checkpoint,
and the directory loads with from_pretrained like any model (eval.py, or --model).

A checkpoint can still be damaged afterwards (a file deleted, a copy cut short). Loading
one without its tokenizer files or chat template silently changes the prompt format, so
verify_checkpoint checks every file against checkpoint.json before anything loads, and
newest_intact_checkpoint falls back past a damaged one to the newest retained intact one
(--resume does); eval.py refuses a run whose newest checkpoint is damaged unless asked for the
newest readable one, so its figures are never silently an older checkpoint's.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import zipfile
from pathlib import Path

import torch

STATE_FILE = "trainer_state.pt"
MANIFEST_FILE = "checkpoint.json"
SHARDS = "dcp"
# What a checkpoint written before checkpoint.json existed must hold to load as it was trained.
REQUIRED_FILES = ("config.json", "tokenizer_config.json", STATE_FILE)


class CheckpointWriteError(OSError, ValueError):
    """A save that could not be completed; a ValueError too, so the entry points print its one line."""


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def publish_directory(path: Path, write) -> None:
    """write(tmp) fills a temporary directory beside `path`, which is then renamed to `path`: a reader
    sees all of it or nothing. A cache entry another process published first is kept (both hold the same)."""
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    try:
        write(tmp)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, path)
    except OSError:
        if not path.is_dir():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def save_checkpoint(run_dir: Path, model, tokenizer, iteration: int, step: int, config: dict,
                    optimizer_state: dict, model_state: dict | None = None, payload=None, ranks=None,
                    keep: int = 2, extra: dict | None = None) -> Path:
    """Write checkpoint `iteration`, point `latest` at it, keep the newest `keep` checkpoints.

    One process: model_state None (the model's own weights), payload None. Under FSDP every
    rank calls it with the gathered full weights as model_state and payload(directory)
    writing this rank's shards (a collective); rank 0 alone writes everything else.
    `extra` joins the trainer state (e.g. the lagged sampler's weights).
    Any failure while writing (a full disk above all) raises CheckpointWriteError with one line
    naming the path, and leaves `latest` on the previous complete checkpoint.
    """
    if keep < 1:
        raise ValueError(f"keep_checkpoints: must be >= 1, got {keep}")
    main = ranks is None or ranks.rank == 0
    barrier = ranks.barrier if ranks is not None else (lambda: None)
    name = f"checkpoints/iter-{iteration:06d}"
    final, tmp = run_dir / name, run_dir / "checkpoints" / f".tmp-iter-{iteration:06d}"
    try:
        if main:
            shutil.rmtree(tmp, ignore_errors=True)
        barrier()
        if payload is not None:
            payload(tmp)
        barrier()  # every shard is on disk before rank 0 renames the directory
        if main:
            write_checkpoint_files(tmp, model, tokenizer, model_state, optimizer_state, iteration, step, config,
                                   extra)
            replace_directory(tmp, final)
            write_text_atomic(run_dir / "latest", name)
    except Exception as error:
        raise CheckpointWriteError(save_failure(error, final, run_dir)) from error
    finally:
        if main:
            shutil.rmtree(tmp, ignore_errors=True)
    if main:
        remove_old_checkpoints(run_dir, final, keep)
    barrier()
    return final


def write_checkpoint_files(directory: Path, model, tokenizer, model_state: dict | None, optimizer_state: dict,
                           iteration: int, step: int, config: dict, extra: dict | None = None) -> None:
    """Model, tokenizer (with its chat template), trainer state, then the manifest that lists them all."""
    model.save_pretrained(directory, state_dict=model_state)
    tokenizer.save_pretrained(directory)
    torch.save({"iteration": iteration, "step": step, "config": config, "rng": rng_state(),
                "optimizer": optimizer_state, **(extra or {})}, directory / STATE_FILE)
    files = {p.name: p.stat().st_size for p in sorted(directory.iterdir()) if p.is_file()}
    dtype = str(model.dtype).removeprefix("torch.")
    (directory / MANIFEST_FILE).write_text(json.dumps({"dtype": dtype, "files": files}, indent=1))


def is_sharded(checkpoint: Path) -> bool:
    """Whether an FSDP run wrote this checkpoint (its optimizer state is in the shards)."""
    return (Path(checkpoint) / SHARDS).is_dir()


def replace_directory(source: Path, target: Path) -> None:
    """Move `source` to `target`, replacing a directory of that name (it may be a damaged one resume skipped)."""
    if target.exists():
        old = target.with_name(f".tmp-replaced-{target.name}-{os.getpid()}")
        os.replace(target, old)
        os.replace(source, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(source, target)


def save_failure(error: Exception, final: Path, run_dir: Path) -> str:
    """One line for a failed save: a full disk is named as such, whatever the writer's own message."""
    previous = (run_dir / "latest").read_text().strip() if (run_dir / "latest").is_file() else None
    kept = f"`latest` still names {previous}" if previous else "the run has no checkpoint yet"
    if disk_full(error, run_dir):
        reason = "the disk is full; free space or move the run to a larger disk, then --resume"
    else:
        reason = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    return f"checkpoint: could not write {final} ({reason}); {kept}"


def disk_full(error: BaseException, run_dir: Path) -> bool:
    """ENOSPC/EDQUOT anywhere in the chain, or no space left (torch.save reports it only as a bad position)."""
    while error is not None:
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        error = error.__cause__ or error.__context__
    try:
        return shutil.disk_usage(run_dir).free < 2**20
    except OSError:
        return False


def remove_old_checkpoints(run_dir: Path, final: Path, keep: int) -> None:
    """Keep `final` and the keep - 1 newest before it; newer ones belong to a run that was resumed
    from an earlier checkpoint, so `latest` no longer leads to them."""
    others = sorted(p for p in (run_dir / "checkpoints").glob("iter-*") if p != final)
    older = [p for p in others if p.name < final.name]
    newer = [p for p in others if p.name > final.name]
    for stale in older[:max(0, len(older) - (keep - 1))] + newer:
        shutil.rmtree(stale, ignore_errors=True)


def remove_temporary_checkpoints(run_dir: Path) -> list[Path]:
    """Delete what a save killed midway left behind; each is a full copy of a model.

    Call it only while holding the run lock: another process's save in progress looks the same.
    """
    checkpoints = Path(run_dir) / "checkpoints"
    leftovers = sorted(p for p in checkpoints.iterdir() if p.name.startswith(".tmp-")) if checkpoints.is_dir() else []
    leftovers += sorted(Path(run_dir).glob("latest.tmp-*"))
    for path in leftovers:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    if leftovers:
        print(f"checkpoint: removed {len(leftovers)} unfinished save(s) left by an interrupted run: "
              f"{', '.join(p.name for p in leftovers)}")
    return leftovers


def latest_checkpoint(run_dir: Path) -> Path | None:
    pointer = run_dir / "latest"
    if not pointer.is_file():
        return None
    path = run_dir / pointer.read_text().strip()
    return path if (path / STATE_FILE).is_file() else None


def checkpoint_problem(path: Path) -> str | None:
    """What is wrong with a checkpoint directory, in a few words naming the file; None when intact."""
    path = Path(path)
    if not path.is_dir():
        return "the directory is missing"
    manifest = path / MANIFEST_FILE
    if manifest.is_file():
        try:
            expected = json.loads(manifest.read_text())["files"]
        except (ValueError, KeyError):
            return f"{MANIFEST_FILE} is damaged"
    else:
        expected = {name: None for name in REQUIRED_FILES}
        if not any(path.glob("*.safetensors")):
            return "it holds no *.safetensors weights"
    for name, size in expected.items():
        if not (path / name).is_file():
            return f"{name} is missing"
        if size is not None and (path / name).stat().st_size != size:
            return f"{name} is {(path / name).stat().st_size} bytes, {size} were written"
    for weights in sorted(path.glob("*.safetensors")):
        problem = safetensors_problem(weights)
        if problem:
            return f"{weights.name} is damaged ({problem})"
    if not zipfile.is_zipfile(path / STATE_FILE):  # torch.save writes a zip whose index is at the end
        return f"{STATE_FILE} is damaged (cut short)"
    return None


def safetensors_problem(path: Path) -> str | None:
    """safetensors checks that the header parses and that the tensors it lists fill the file exactly."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), "pt"):
            return None
    except Exception as error:  # safetensors raises its own error type for every kind of damage
        return str(error).splitlines()[0]


def verify_checkpoint(path: Path) -> None:
    """A one-line ValueError naming the missing or damaged file of checkpoint `path`, if any."""
    problem = checkpoint_problem(path)
    if problem:
        raise ValueError(f"checkpoint: {path} cannot be loaded: {problem}")


def checkpoints_newest_first(run_dir: Path) -> list[Path]:
    """A run's checkpoints, newest first: the one `latest` names (whether or not it is still there), then the
    retained ones from newest to oldest."""
    run_dir = Path(run_dir)
    candidates = sorted((run_dir / "checkpoints").glob("iter-*"), reverse=True)
    pointer = run_dir / "latest"
    if pointer.is_file():
        named = run_dir / pointer.read_text().strip()
        candidates = [named] + [p for p in candidates if p != named]
    return candidates


def newest_intact_checkpoint(run_dir: Path) -> tuple[Path | None, list[str]]:
    """(the checkpoint to resume from, one note per damaged checkpoint passed over to reach it).

    `latest` first; if it is damaged or missing, the retained checkpoints from newest to oldest.
    """
    skipped = []
    for candidate in checkpoints_newest_first(run_dir):
        problem = checkpoint_problem(candidate)
        if problem is None:
            return candidate, skipped
        skipped.append(f"skipped {candidate.name}: {problem}")
    return None, skipped


def resume_point(run_dir: Path, config: dict, resume: bool, resumable=()) -> tuple[Path | None, dict | None]:
    """(checkpoint, trainer state) a run continues from: (None, None) for a fresh start, or under --resume the newest
    intact checkpoint, refused if the run's flags other than `resumable` differ from the checkpoint's. A --resume
    of a run stopped before its first save starts it over; a fresh start into a run's directory is refused."""
    metrics = Path(run_dir) / "metrics.jsonl"
    if not resume:
        if metrics.exists():
            raise ValueError(f"name: {run_dir} already holds a run; pass --resume or another --name")
        return None, None
    checkpoint, skipped = newest_intact_checkpoint(run_dir)
    for note in skipped:
        print(f"resume: {note}")
    if checkpoint is None:
        print(f"resume: {run_dir} has no intact checkpoint yet; starting the run over from iteration 0")
        metrics.unlink(missing_ok=True)
        return None, None
    state = load_trainer_state(checkpoint)
    changed = sorted(k for k, v in config.items() if k not in resumable and state["config"].get(k) != v)
    if changed:
        raise ValueError(f"resume: flags differ from the checkpoint's run: {', '.join(changed)}")
    return checkpoint, state


def checkpoint_dtype(path: Path) -> str | None:
    """The dtype a checkpoint's weights were trained in (eval.py evaluates in it), if recorded."""
    for name, key in ((MANIFEST_FILE, "dtype"), ("config.json", "dtype"), ("config.json", "torch_dtype")):
        file = Path(path) / name
        if file.is_file():
            value = json.loads(file.read_text()).get(key)
            if isinstance(value, str):
                return value
    return None


def load_trainer_state(checkpoint: Path) -> dict:
    return torch.load(checkpoint / STATE_FILE, weights_only=False)

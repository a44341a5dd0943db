"""train.py itself on one CUDA device, in one command: the routes bench/gpu.py times piece by piece, run whole.

    python -m research.bench.train_check                 # on a CUDA device; writes one JSON record
    python -m research.bench.train_check --cpu-smoke     # no GPU: every step, shortened, on the CPU (CI)

Four steps, each with its exit status and wall time:
  default    python train.py (the default run) on the device
  fsdp       torchrun --standalone --nproc_per_node 1 train.py --fsdp (nccl on CUDA, gloo on the CPU), 2 iterations
  moe        python train.py --model tiny-qwen3-moe, 2 iterations
  protocol   one rollout batch of --protocol paper (N = 8 one-epoch mini-batches of 32 prompts x 8 responses,
             256 new tokens, --autocast --gradient-checkpointing) on a Qwen3-0.6B-shaped random-init model:
             time per update, sampling and training tokens/s, peak memory
Nothing is downloaded: the 0.6B shape is bench/gpu.py's Qwen3Config at Qwen3's vocabulary, written to a
temporary directory with the tiny models' character tokenizer (the prompts are the addition task's).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from research.bench.gpu import VOCAB, make_config

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "research/bench/results/train_check.json"
STEP_TIMEOUT_S = 420  # all four within the 8 minutes on a GPU is the aim; one step may not hang the rest
# What each step adds to train.py's flags: the measurement, and the CPU smoke's shortened stand-in.
STEPS = {
    "default": ([], ["--iterations", "1"]),
    "fsdp": (["--iterations", "2"], ["--iterations", "1", "--sft-steps", "0", "--prompts-per-iteration", "4",
                                     "--group-size", "2", "--reuse", "2", "--max-new-tokens", "6",
                                     "--eval-problems", "2", "--eval-samples", "1"]),
    "moe": (["--model", "tiny-qwen3-moe", "--iterations", "2"],
            ["--model", "tiny-qwen3-moe", "--iterations", "1", "--sft-steps", "0", "--prompts-per-iteration", "4",
             "--group-size", "2", "--reuse", "2", "--max-new-tokens", "6", "--eval-problems", "2",
             "--eval-samples", "1"]),
}
PROTOCOL = ["--protocol", "paper", "--iterations", "1", "--task", "addition", "--sft-steps", "0",
            "--max-new-tokens", "256", "--eval-problems", "32", "--eval-samples", "1", "--eval-every", "100"]
PROTOCOL_GPU = ["--autocast", "--gradient-checkpointing", "--micro-batch", "16", "--logprob-chunk-mb", "256",
                "--rollout-batch", "256"]
PROTOCOL_SMOKE = ["--prompts-per-iteration", "8", "--group-size", "2", "--max-new-tokens", "8",
                  "--eval-problems", "2", "--logprob-chunk-mb", "16"]


def run_step(name: str, command: list[str], env: dict) -> dict:
    start = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
        status, tail = done.returncode, (done.stdout + done.stderr)[-800:]
    except subprocess.TimeoutExpired:
        status, tail = "timeout", f"over {STEP_TIMEOUT_S} s"
    record = {"step": name, "exit_status": status, "wall_s": round(time.perf_counter() - start, 1)}
    return record if status == 0 else {**record, "output_tail": tail}


def write_random_model(directory: Path, shape: str) -> str:
    """A random-init Qwen3 of `shape` at Qwen3's vocabulary, with the character tokenizer, as a model directory."""
    import transformers

    from nano_respo.models import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    config = make_config(shape, VOCAB)
    config.pad_token_id, config.eos_token_id, config.bos_token_id = tokenizer.pad_token_id, tokenizer.eos_token_id, None
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


def protocol_step(model_dir: str, out_dir: str, flags: list[str], device: str) -> dict:
    """One rollout batch of the paper's protocol in this process (so its peak memory is readable)."""
    from nano_respo.runs import read_metrics
    from research.cli import parse_config
    from train import TrainConfig, train

    cfg = parse_config(TrainConfig, [*PROTOCOL, *flags, "--model", model_dir, "--device", device,
                                     "--out-dir", out_dir, "--name", "protocol", "--no-plots"])
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    try:
        run_dir = train(cfg)
    except Exception as error:  # the record says what failed; the other steps' figures still count
        return {"step": "protocol", "exit_status": 1, "error": f"{type(error).__name__}: {error}"[:800]}
    records = read_metrics(run_dir)
    updates = [r for r in records if r["kind"] == "train"]
    iteration_s = sum(r["iteration_s"] for r in records if r["kind"] == "time")
    return {"step": "protocol", "exit_status": 0, "wall_s": round(time.perf_counter() - start, 1),
            "updates": len(updates), "seconds_per_update": iteration_s / len(updates),
            "gen_tokens_per_s": updates[0]["gen_tokens_per_s"],
            "train_tokens_per_s": sum(r["train_tokens_per_s"] for r in updates) / len(updates),
            "peak_memory_gb": torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else None,
            "skipped_updates": sum(r["skipped"] for r in updates)}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu-smoke", action="store_true", help="no GPU: every step shortened, on the CPU")
    parser.add_argument("--record", default=str(RECORD), help="where the JSON record is written")
    args = parser.parse_args(argv)
    device = "cpu" if args.cpu_smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: no CUDA device; --cpu-smoke runs every step on the CPU")
    smoke = int(args.cpu_smoke)
    with tempfile.TemporaryDirectory(prefix="train-check-") as tmp:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1", "PYTHONPATH": str(ROOT)}
        common = ["--device", device, "--out-dir", tmp, "--no-plots"]
        steps = [run_step("default", [sys.executable, "train.py", *STEPS["default"][smoke], *common, "--name", "d"],
                          env)]
        fsdp = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1", "train.py",
                "--fsdp", *STEPS["fsdp"][smoke], "--out-dir", tmp, "--no-plots", "--name", "fsdp"]
        steps.append(run_step("fsdp", fsdp, env))
        steps.append(run_step("moe", [sys.executable, "train.py", *STEPS["moe"][smoke], *common, "--name", "moe"],
                              env))
        model_dir = write_random_model(Path(tmp) / "model", "qwen3-tiny" if smoke else "qwen3-0.6b")
        steps.append(protocol_step(model_dir, tmp, PROTOCOL_SMOKE if smoke else PROTOCOL_GPU, device))
    record = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "cpu_smoke": args.cpu_smoke,
              "torch": torch.__version__, "all_passed": all(s["exit_status"] == 0 for s in steps), "steps": steps}
    Path(args.record).parent.mkdir(parents=True, exist_ok=True)
    Path(args.record).write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record))
    return record


if __name__ == "__main__":
    main()

"""Models and tokenizers, always through AutoModelForCausalLM / AutoTokenizer.

A hub id or a local directory loads as usual. The two offline defaults, `tiny-qwen3` and
`tiny-qwen3-moe`, are randomly initialised Qwen3 / Qwen3-MoE models with a character-level
tokenizer; they are created once with save_pretrained under the cache directory and then
loaded back through exactly the path a real checkpoint takes, so nothing downstream knows
the difference.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import re
import shutil
import string
from pathlib import Path

import torch

from .checkpoint import (MANIFEST_FILE, STATE_FILE, newest_intact_checkpoint, publish_directory,
                             verify_checkpoint)

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # tokenizers' threads and a forked process do not mix
PAD, EOS = "<|endoftext|>", "<|im_end|>"
WEIGHT_DTYPES = ("float32", "bfloat16", "float16")
DEVICES = "auto, cpu, cuda or cuda:N"
SPECIAL_TOKENS = [PAD, "<|im_start|>", EOS]
CHARACTERS = string.digits + string.ascii_letters + string.punctuation + " \n"
# The character tokenizer's "unknown" token is deliberately absent from its vocabulary: the
# tokenizers library then fails on a character it does not know instead of dropping it, and
# its error shows this name. The vocabulary, and so every tiny model, stays as it is.
UNKNOWN_CHARACTER = "<a character tiny-qwen3 does not know: ASCII letters, digits, punctuation, space, newline>"
# ChatML's special tokens in a compact layout ("<|im_start|>u:...<|im_end|><|im_start|>a:"):
# a character model pays one position per template character, on every sample.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'][0] }}:{{ message['content'] }}<|im_end|>"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>a:{% endif %}"
)
# Small enough for a CPU run in minutes, large enough to learn the tasks: ~0.3M parameters dense,
# ~0.5M with 8 experts top-2.
TINY_SHAPE = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  head_dim=32, max_position_embeddings=512, tie_word_embeddings=True)
TINY_MODELS = {
    "tiny-qwen3": ("Qwen3Config", dict(intermediate_size=256)),
    "tiny-qwen3-moe": ("Qwen3MoeConfig", dict(intermediate_size=256, moe_intermediate_size=64,
                                              num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
                                              router_aux_loss_coef=0.0)),
}


# Warm-start SFT steps (the most before annealing; see sft.py) that take each tiny model
# through its sudden transition on `reverse` (strings of 2-40 digits), with a margin for
# seeds that learn late.
TINY_WARM_START_STEPS = {"tiny-qwen3": 2000, "tiny-qwen3-moe": 2000}


def cache_dir() -> Path:
    """NANO_RESPO_CACHE, default ~/.cache/nano_respo."""
    return Path(os.environ.get("NANO_RESPO_CACHE", Path.home() / ".cache" / "nano_respo"))


def build_char_tokenizer():
    """A character-level fast tokenizer: one token per character, ChatML special tokens."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + list(CHARACTERS))}
    # BPE with no merges and no pre-tokenizer splits any text into its characters.
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNKNOWN_CHARACTER))
    core.add_special_tokens(SPECIAL_TOKENS)
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token=PAD, eos_token=EOS,
                                   chat_template=CHAT_TEMPLATE, padding_side="left")


def unknown_characters(tokenizer, text: str) -> list[str]:
    """The characters of `text` a tokenizer cannot encode (byte-level tokenizers encode every one)."""
    if encodes(tokenizer, text):
        return []
    return sorted(character for character in set(text) if not encodes(tokenizer, character))


def encodes(tokenizer, text: str | list[str]) -> bool:
    try:
        tokenizer(text, add_special_tokens=False)
    except Exception:  # the tokenizers library signals an unknown character with a bare Exception
        return False
    return True


def refuse_unknown_characters(tokenizer, problems) -> None:
    """A one-line error naming the first problem whose prompt or answer the tokenizer cannot encode."""
    texts = [text for problem in problems for text in (problem.prompt, problem.answer)]
    if encodes(tokenizer, texts):  # one batched call: the common case costs little
        return
    for text in texts:
        unknown = unknown_characters(tokenizer, text)
        if unknown:
            raise ValueError(f"task: {text[:60]!r} holds characters the model's tokenizer does not know: "
                             f"{', '.join(map(repr, unknown))}")


def create_tiny_model(name: str, path: Path, seed: int = 0) -> None:
    """Write a random-init tiny model and its tokenizer to path, atomically."""
    import transformers

    config_class, extra = TINY_MODELS[name]
    tokenizer = build_char_tokenizer()
    config = getattr(transformers, config_class)(
        vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None, **TINY_SHAPE, **extra)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(config)

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "nano_respo.json").write_text(json.dumps({"created_as": name, "seed": seed}))
        if not is_complete(tmp):  # e.g. save_pretrained inside a process group writes on rank 0 only
            raise RuntimeError(f"model: creating {name} wrote no weights to {tmp}; create it outside torch.distributed")
        if path.exists() and not is_complete(path):  # a broken earlier attempt: replace it
            shutil.rmtree(path, ignore_errors=True)

    publish_directory(path, write)


def is_complete(path: Path) -> bool:
    """A model directory that from_pretrained can load: a config and its weights."""
    return (path / "config.json").exists() and any(path.glob("*.safetensors"))


def tiny_model_dir(name: str) -> Path:
    """Where a tiny default is cached, named by what makes it: its shape, tokenizer, creating code and the
    library versions whose initialisation it runs (an edit of any of them names a new directory)."""
    from importlib.metadata import version

    made_by = (TINY_SHAPE, TINY_MODELS[name], CHAT_TEMPLATE, SPECIAL_TOKENS, CHARACTERS, inspect.getsource(create_tiny_model),
               inspect.getsource(build_char_tokenizer), torch.__version__, version("transformers"))
    return cache_dir() / "models" / f"{name}-{hashlib.sha256(repr(made_by).encode()).hexdigest()[:12]}"


def resolve_model_path(name: str) -> str:
    """A tiny default (created on first use), a run or checkpoint directory, or a hub id / local dir."""
    if name in TINY_MODELS:
        path = tiny_model_dir(name)
        if not is_complete(path):
            create_tiny_model(name, path)
        return str(path)
    local = Path(name).expanduser()
    if looks_local(name) and not local.exists():  # asking the hub would retry for a minute, then blame the network
        missing = missing_part(local)
        where = f" ({missing} is missing)" if missing != str(local) else ""
        raise ValueError(f"model: {name!r} does not exist{where}")
    if is_run_directory(local):
        return str(run_directory_checkpoint(local))
    if (local / STATE_FILE).is_file() or (local / MANIFEST_FILE).is_file():  # a run's checkpoint: check it first
        verify_checkpoint(local)
        return str(local)
    if local.exists():
        if not (local / "config.json").exists():
            raise ValueError(f"model: {name!r} is a directory without config.json (not a model or run directory)")
        return str(local)
    if name.count("/") != 1 or name.startswith((".", "/")):
        raise ValueError(f"model: unknown model {name!r}; use tiny-qwen3, tiny-qwen3-moe, a local "
                         f"directory or a hub id such as Qwen/Qwen3-0.6B")
    return name


def looks_local(name: str) -> bool:
    """A path, not a hub id: starts with ./ ../ / or ~, or its first component is an existing directory."""
    return name.startswith(("./", "../", "/", "~")) or Path(name.split("/", 1)[0]).is_dir()


def missing_part(path: Path) -> str:
    """The shortest leading part of `path` that does not exist (runs/nope of runs/nope/checkpoints)."""
    for part in reversed(path.parents):
        if not part.exists():
            return str(part)
    return str(path)


def is_run_directory(path: Path) -> bool:
    """A directory train.py writes (it holds its own config.json, which is not a model's)."""
    return any((path / name).exists() for name in ("latest", "metrics.jsonl", "checkpoints"))


def run_directory_checkpoint(run_dir: Path) -> Path:
    """The newest intact checkpoint of a run, naming any damaged one passed over."""
    checkpoint, skipped = newest_intact_checkpoint(run_dir)
    for note in skipped:
        print(f"model: {run_dir}: {note}")
    if checkpoint is None:
        raise ValueError(f"model: {str(run_dir)!r} is a run directory without an intact checkpoint yet; resume "
                         f"it or pass a model")
    return checkpoint


def load_model(name: str, dtype: str = "float32", device: str = "cpu", gradient_checkpointing: bool = False):
    """(model, tokenizer) through AutoModelForCausalLM / AutoTokenizer; left padding for generation."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_path(name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    except OSError as error:
        raise ValueError(f"model: could not load {name!r} ({str(error).splitlines()[0]}); hub models "
                         f"need the network (unset HF_HUB_OFFLINE) or a local copy") from None
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model.to(device), tokenizer


# How a prompt reaches the model: the checkpoint's chat template as shipped (Qwen3's chat model then thinks), the
# same template with Qwen3's thinking off, or no template (the prompt text as it is: a Base model's plain prompt).
PROMPT_FORMATS = ("template", "no-thinking", "plain")
THINKING_OFF = "{%- set enable_thinking = false %}"  # what apply_chat_template(..., enable_thinking=False) sets


def apply_prompt_format(tokenizer, prompt_format: str):
    """The tokenizer, its chat template set for `prompt_format` (PROMPT_FORMATS); saved with every checkpoint,
    so a run's format travels with it."""
    if prompt_format == "plain":
        tokenizer.chat_template = None
    elif prompt_format == "no-thinking" and tokenizer.chat_template and \
            not tokenizer.chat_template.startswith(THINKING_OFF):
        tokenizer.chat_template = THINKING_OFF + tokenizer.chat_template
    return tokenizer


def check_device(name: str) -> str:
    """The one check of a device name: auto, cpu, cuda or cuda:N (nothing is asked of CUDA here)."""
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", name):
        raise ValueError(f"device: unknown device {name!r}; choose {DEVICES}")
    return name


def resolve_device(name: str) -> str:
    """cpu, cuda, cuda:N; auto = cuda when available."""
    check_device(name)
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device: {name!r} requested but CUDA is not available")
    return name


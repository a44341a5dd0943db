"""The warm starts shipped with the package (nano_respo/shipped.py, nano_respo/warm_starts/).

A default run loads them instead of training, through from_pretrained, and says so in one line; other
settings, or --sft-from-scratch, train one as before; a shipped warm start made by other warm-start code
refuses to load, in one line that names the flag to train one. tests/run/test_shipped_warm_starts.py
retrains them from their manifests.
"""

import inspect
import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from nano_respo import rollout, sft, shipped  # noqa: E402
from nano_respo.config import TrainConfig  # noqa: E402
from nano_respo.models import cache_dir  # noqa: E402
from nano_respo.run.session import build_task, initial_model  # noqa: E402

pytestmark = pytest.mark.usefixtures("model_cache")
MODELS = ("tiny-qwen3", "tiny-qwen3-moe")


def refuse_training(*args, **kwargs):
    raise AssertionError("trained a warm start where a shipped one should load")


def replace_sft(monkeypatch, replacement) -> None:
    """sft.sft replaced for the test, the code hash kept as today's (it hashes sft.sft's code)."""
    code = sft.warm_start_code()
    monkeypatch.setattr(sft, "warm_start_code", lambda: code)
    monkeypatch.setattr(sft, "sft", replacement)


def test_both_tiny_models_ship_a_warm_start_with_its_manifest():
    names = {manifest["key"]["model"]: path for path, manifest in shipped.manifests()}
    assert sorted(names) == sorted(MODELS)
    for path, manifest in shipped.manifests():
        assert manifest["report"]["converged_at"] is not None, f"{path.name} did not converge"
        assert manifest["command"].startswith("python tools/ship_warm_starts.py")
        assert {"heldout_pass@1", "heldout_acc"} <= set(manifest["heldout"])
        assert (path / "config.json").is_file() and (path / "model.safetensors").is_file()


@pytest.mark.parametrize("model_name", MODELS)
def test_a_default_run_loads_the_shipped_warm_start_says_so_and_trains_nothing(model_name, monkeypatch, capsys,
                                                                                 tmp_path):
    replace_sft(monkeypatch, refuse_training)
    cfg = TrainConfig(model=model_name, device="cpu")
    model, _ = initial_model(cfg, build_task(cfg), "cpu")
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warm start:")]
    assert len(lines) == 1 and lines[0].startswith(f"warm start: shipped {model_name}-reverse ")
    assert "--sft-from-scratch" in lines[0]
    # Saved again, the loaded model gives the shipped file's tensors (transformers may hold an MoE's experts in
    # another layout in memory, and writes them back in the file's).
    model.save_pretrained(tmp_path)
    weights = load_file(str(shipped.SHIPPED_DIR / f"{model_name}-reverse" / "model.safetensors"))
    again = load_file(str(tmp_path / "model.safetensors"))
    assert sorted(again) == sorted(weights) and all(torch.equal(again[k], weights[k]) for k in weights)
    assert not (cache_dir() / "sft").exists(), "a shipped warm start wrote to the cache"


def test_sft_from_scratch_trains_the_same_settings_instead(monkeypatch, capsys):
    calls = []

    def quick_sft(model, *args, **kwargs):
        calls.append(args)
        return {"exact": 0.0, "converged_at": None, "steps": 0}
    replace_sft(monkeypatch, quick_sft)
    cfg = TrainConfig(model="tiny-qwen3", device="cpu", sft_from_scratch=True)
    initial_model(cfg, build_task(cfg), "cpu")
    assert len(calls) == 1 and "shipped" not in capsys.readouterr().out
    assert len(list((cache_dir() / "sft").glob("tiny-qwen3-reverse-*/warm_start.json"))) == 1


def test_other_settings_do_not_take_it_but_another_cpu_or_library_version_does():
    path, manifest = shipped.manifests()[0]
    key = manifest["key"]
    assert shipped.shipped_warm_start(key) == path
    for name, value in {"seed": key["seed"] + 1, "steps": key["steps"] + 1, "data": "other", "anneal": "converged",
                        "label_smoothing": 0.0}.items():
        assert shipped.shipped_warm_start({**key, name: value}) is None, name
    assert shipped.shipped_warm_start({**key, "cpu": "another CPU", "torch": "0", "transformers": "0"}) == path


def test_a_shipped_warm_start_from_other_warm_start_code_refuses_in_one_line_naming_the_flag(monkeypatch):
    monkeypatch.setattr(sft, "warm_start_code", lambda: "0" * 16)
    monkeypatch.setattr(sft, "sft", refuse_training)
    cfg = TrainConfig(model="tiny-qwen3", device="cpu")
    with pytest.raises(ValueError, match="--sft-from-scratch") as refused:
        initial_model(cfg, build_task(cfg), "cpu")
    assert "\n" not in str(refused.value) and "tiny-qwen3-reverse" in str(refused.value)


def test_todays_code_is_the_code_that_made_the_shipped_warm_starts():
    """An edit of the warm start's code (sft.WARM_START_CODE) needs new shipped files: python tools/ship_warm_starts.py."""
    made_by = {json.loads((p / "manifest.json").read_text())["key"]["code"] for p, _ in shipped.manifests()}
    assert made_by == {sft.warm_start_code()}


def shipped_code() -> str:
    (code,) = {manifest["key"]["code"] for _, manifest in shipped.manifests()}
    return code


def edit_source(monkeypatch, function, old: str, new: str) -> None:
    """inspect.getsource gives `function`'s source with `old` replaced by `new`, as if its file had been edited."""
    getsource = inspect.getsource
    source = getsource(function)
    assert source.count(old) == 1, f"{old!r} is not in {function.__name__}'s source once"
    monkeypatch.setattr(inspect, "getsource",
                        lambda obj: source.replace(old, new) if obj is function else getsource(obj))


@pytest.mark.parametrize("function, old, new", [
    (rollout.policy_logprobs, "# Position t predicts completion token t; the last position predicts nothing.",
     "# The logits at position t are those of completion token t."),
    (rollout.policy_logprobs, "  # [B, C, V], [B, C]", ""),
    (sft.cosine_lr, "lr at `step` of `steps`: from lr down to 0 along half a cosine.", "Half a cosine from lr to 0."),
    (sft.cosine_lr, '"""lr at `step` of `steps`: from lr down to 0 along half a cosine."""\n', ""),
    (rollout.policy_logprobs, "training_forward(model, batch)",
     "training_forward(\n        model,\n        batch,\n    )"),
], ids=["comment", "trailing-comment", "docstring", "no-docstring", "line-breaks"])
def test_a_comment_docstring_or_layout_edit_keeps_the_shipped_warm_start(function, old, new, monkeypatch, capsys):
    edit_source(monkeypatch, function, old, new)
    assert sft.warm_start_code() == shipped_code()
    # Training is refused at its first step outside the hashed code (replacing sft.sft would change the hash).
    monkeypatch.setattr(sft, "refuse_unknown_characters", refuse_training)
    cfg = TrainConfig(model="tiny-qwen3", device="cpu")
    initial_model(cfg, build_task(cfg), "cpu")
    assert "warm start: shipped tiny-qwen3-reverse " in capsys.readouterr().out


@pytest.mark.parametrize("function, old, new", [
    (sft.cosine_lr, "lr * 0.5 *", "lr * 0.25 *"),
    (sft.cosine_lr, "(1 + math.cos", "(1 - math.cos"),
    (rollout.policy_logprobs, "out.logits[:, :-1]", "out.logits[:, 1:]"),
    (sft.sft, "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
     "torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)"),
], ids=["constant", "operator", "slice", "clip"])
def test_a_changed_constant_or_expression_changes_the_warm_starts_code(function, old, new, monkeypatch):
    edit_source(monkeypatch, function, old, new)
    assert sft.warm_start_code() != shipped_code()


def test_a_changed_recipe_constant_changes_the_warm_starts_code(monkeypatch):
    monkeypatch.setattr(sft, "CONVERGED_EXACT", sft.CONVERGED_EXACT + 0.1)
    assert sft.warm_start_code() != shipped_code()

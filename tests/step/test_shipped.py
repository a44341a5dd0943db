"""The warm starts shipped with the package (nano_respo/shipped.py, nano_respo/warm_starts/).

A default run loads them instead of training, through from_pretrained, and says so in one line; other
settings, or --sft-from-scratch, train one as before. The code version (sft.WARM_START_VERSION), library versions
and CPU setting in a manifest's key are recorded, not matched: a fresh clone anywhere starts from the same model.
tests/run/test_shipped_warm_starts.py retrains them from their manifests.
"""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from nano_respo import sft, shipped  # noqa: E402
from nano_respo.cli import from_flat  # noqa: E402
from nano_respo.models import cache_dir  # noqa: E402
from nano_respo.sft import initial_model  # noqa: E402
from nano_respo.tasks import make_task  # noqa: E402
from train import TrainConfig  # noqa: E402

pytestmark = pytest.mark.usefixtures("model_cache")
MODELS = ("tiny-qwen3", "tiny-qwen3-moe")


def refuse_training(*args, **kwargs):
    raise AssertionError("trained a warm start where a shipped one should load")


def task_of(cfg: TrainConfig):
    """The RL task as train.set_up makes it."""
    return make_task(cfg.task, cfg.task_size, cfg.eval_problems, cfg.heldout_file, seed=0)


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
    monkeypatch.setattr(sft, "sft", refuse_training)
    cfg = TrainConfig(model=model_name, device="cpu")
    model, _ = initial_model(cfg, task_of(cfg), "cpu")
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
    monkeypatch.setattr(sft, "sft", quick_sft)
    cfg = from_flat(TrainConfig, dict(model="tiny-qwen3", device="cpu", sft_from_scratch=True))
    initial_model(cfg, task_of(cfg), "cpu")
    assert len(calls) == 1 and "shipped" not in capsys.readouterr().out
    assert len(list((cache_dir() / "sft").glob("tiny-qwen3-reverse-*/warm_start.json"))) == 1


def test_other_settings_do_not_take_it_but_another_cpu_or_library_version_does():
    path, manifest = shipped.manifests()[0]
    key = manifest["key"]
    assert shipped.shipped_warm_start(key) == path
    for name, value in {"seed": key["seed"] + 1, "steps": key["steps"] + 1, "data": "other", "anneal": "converged",
                        "label_smoothing": 0.0}.items():
        assert shipped.shipped_warm_start({**key, name: value}) is None, name
    assert shipped.shipped_warm_start({**key, "cpu": "another CPU", "torch": "0", "transformers": "0",
                                       "code": "v0"}) == path


def test_the_cache_key_names_todays_code_version_and_a_new_version_still_loads_the_shipped_one(monkeypatch, capsys):
    """An edit of what a warm start computes raises sft.WARM_START_VERSION: the cache trains a new entry (its key
    differs), the shipped files stay taken (retraining them, tests/run/test_shipped_warm_starts.py, says whether
    they are still what the code makes)."""
    cfg = TrainConfig(model="tiny-qwen3", device="cpu")
    key = sft.warm_start_key("tiny-qwen3", task_of(cfg), 2000, 64, 1e-3, 0, "float32", 0.01)
    assert key["code"] == f"v{sft.WARM_START_VERSION}"
    monkeypatch.setattr(sft, "WARM_START_VERSION", sft.WARM_START_VERSION + 1)
    assert sft.warm_start_key("tiny-qwen3", task_of(cfg), 2000, 64, 1e-3, 0, "float32", 0.01) != key
    monkeypatch.setattr(sft, "sft", refuse_training)
    initial_model(cfg, task_of(cfg), "cpu")
    assert "warm start: shipped tiny-qwen3-reverse " in capsys.readouterr().out

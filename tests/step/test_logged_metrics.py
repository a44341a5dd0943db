"""Every metric a default step logs is explained in docs/training.md, and the within-group lengths are the
kernel's reading of whole groups in the order the step hands them over."""

import re
from pathlib import Path

import pytest
import torch

from nano_respo.kernel import GROUP_KEYS, length_excess_in_group
from nano_respo.models import load_model
from nano_respo.tasks import make_task
from train import TrainConfig, rl_iteration

from conftest import parity_reward  # shared with the parity_runs fixture

torch.set_num_threads(1)
pytestmark = pytest.mark.usefixtures("model_cache")
DOCS = Path(__file__).resolve().parents[2] / "docs" / "training.md"
QUANTILES = re.compile(r"log_w_q(10|50|90)_(pos|neg)")  # documented as `log_w_q10_pos` ... `log_w_q90_neg`


def test_every_key_of_a_train_record_is_explained_in_the_training_doc():
    torch.manual_seed(0)
    model, tokenizer = load_model("tiny-qwen3", "float32", "cpu")
    task = make_task("addition", None, 8, None, seed=0)
    task.reward = parity_reward
    cfg = TrainConfig(prompts_per_iteration=4, group_size=4, reuse=2, epochs=1, max_new_tokens=6)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    _, records, _ = rl_iteration(model, tokenizer, task, optimizer, cfg, 0, 0)
    docs = DOCS.read_text()
    named = set(re.findall(r"`([a-z_0-9]+)`", docs))
    assert "`log_w_q10_pos` ... `log_w_q90_neg`" in docs
    for record in records:
        assert set(GROUP_KEYS) <= set(record)  # the step passes its group size
        unexplained = [k for k in record if k not in named and not QUANTILES.fullmatch(k)]
        assert not unexplained, f"docs/training.md does not explain {unexplained}"


def test_the_length_excess_is_taken_within_each_group():
    lengths = torch.tensor([4, 6, 9, 1, 3, 5])  # [B] two groups of 3
    positive = torch.tensor([True, True, False, False, True, True])
    excess = length_excess_in_group(lengths, positive, 3)
    assert excess[[0, 1, 4, 5]].tolist() == [-1.0, 1.0, -1.0, 1.0]  # against 5 in group 1, against 4 in group 2

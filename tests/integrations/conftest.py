"""Shared fixtures of the integration tests: a tiny random Qwen3 and tokenizer, built offline."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(int(os.environ.get("TORCH_NUM_THREADS", "1")))

CHARS = "0123456789+=abcdefghijklmnopqrstuvwxyz "


def build_tokenizer():
    """A character-level fast tokenizer with pad/eos, no download."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, **{c: i + 2 for i, c in enumerate(CHARS)}}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>")


@pytest.fixture(scope="session")
def tiny_qwen3_dir(tmp_path_factory):
    """A random-init two-layer Qwen3 and its tokenizer, saved with save_pretrained."""
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    tokenizer = build_tokenizer()
    config = Qwen3Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=128,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=None, tie_word_embeddings=True)
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(pad_token_id=tokenizer.pad_token_id,
                                               eos_token_id=tokenizer.eos_token_id)
    path = tmp_path_factory.mktemp("tiny-qwen3")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)

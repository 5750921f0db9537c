"""The numpy forward pass of all-MiniLM-L6-v2 (registry.search.semantic) against the model's
published similarities, and what it refuses: no database needed."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

from registry.search.semantic import (
    DIMENSIONS,
    MODEL_SHA256,
    ModelUnavailable,
    SentenceEncoder,
    model_archive_path,
    sentence_encoder,
)

# sentence-transformers' quickstart (sbert.net, "Quickstart", Sentence Transformer) encodes these
# with all-MiniLM-L6-v2 and prints their cosine similarities: 0.6660, 0.1046, 0.1411.
QUICKSTART = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
QUICKSTART_SIMILARITIES = {(0, 1): 0.6660, (0, 2): 0.1046, (1, 2): 0.1411}


def test_the_forward_pass_gives_the_published_similarities():
    vectors = sentence_encoder().encode(QUICKSTART)
    assert vectors.shape == (3, DIMENSIONS)
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    similarities = vectors @ vectors.T
    for (left, right), published in QUICKSTART_SIMILARITIES.items():
        assert abs(float(similarities[left, right]) - published) < 6e-4, (left, right)


def test_batching_and_padding_do_not_change_a_text_vector():
    texts = [*QUICKSTART, "list the open pull requests of a repository", "x"]
    encoder = sentence_encoder()
    together = encoder.encode(texts, batch_size=8)
    alone = np.stack([encoder.encode([text])[0] for text in texts])
    assert np.abs(together - alone).max() < 1e-5
    assert encoder.encode([]).shape == (0, DIMENSIONS)


def test_a_long_text_is_cut_not_refused():
    vector = sentence_encoder().encode(["word " * 2000])
    assert vector.shape == (1, DIMENSIONS)
    assert np.isfinite(vector).all()


def test_weights_other_than_the_known_ones_are_refused(tmp_path: Path):
    with zipfile.ZipFile(model_archive_path()) as source:
        members = {name: source.read(name) for name in source.namelist() if not name.endswith("/")}
    weights = bytearray(members["model.safetensors"])
    weights[-1] ^= 1
    members["model.safetensors"] = bytes(weights)
    tampered = tmp_path / "model.zip"
    with zipfile.ZipFile(tampered, "w") as target:
        for name, data in members.items():
            target.writestr(name, data)
    with pytest.raises(ModelUnavailable, match=MODEL_SHA256):
        SentenceEncoder.from_archive(tampered)

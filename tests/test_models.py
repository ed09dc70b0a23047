"""Models, sizes and optimizer recipes on synthetic tensors of the model-input contract."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import BertConfig, BertForPreTraining, GPT2Config, GPT2LMHeadModel

from corpusforge.trainer.models import GPT, Bert, build_model, count_params, gpt_inputs, model_config
from corpusforge.trainer.optim import lr_factor, make_optimizer, recipe
from corpusforge.trainer.sizes import SIZES, padded_vocab_size

B, L, P, V = 4, 32, 5, 1000


def bert_batch(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    length = torch.tensor([32, 20, 11, 25])
    pos = torch.arange(L)[None, :]
    mask = pos < length[:, None]
    return {
        "input_ids": torch.randint(5, V, (B, L), generator=g) * mask,
        "attention_mask": mask,
        "token_type_ids": ((pos >= 6) & mask).long(),
        "masked_lm_positions": torch.tensor([[1, 3, 5, 7, 9], [2, 4, 6, 0, 0], [1, 2, 0, 0, 0], [3, 8, 12, 20, 0]]),
        "masked_lm_ids": torch.randint(5, V, (B, P), generator=g),
        "masked_lm_weights": torch.tensor([[1.0] * 5, [1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0]]),
        "next_sentence_label": torch.tensor([0, 1, 1, 0]),
    }


def bert_tiny() -> Bert:
    torch.manual_seed(0)
    return build_model(model_config("bert-tiny", V, dropout=0.0)).eval()


def gpt_tiny() -> GPT:
    torch.manual_seed(0)
    return build_model(model_config("gpt-tiny", V)).eval()


def test_bert_shapes_and_initial_loss_near_uniform():
    out = bert_tiny()(**bert_batch())
    assert out["mlm_logits"].shape == (B, P, padded_vocab_size(V)) and out["nsp_logits"].shape == (B, 2)
    # N(0, 0.02) init predicts almost uniformly: MLM loss ~ ln(V), NSP ~ ln(2)
    assert abs(out["mlm_loss"].item() - math.log(padded_vocab_size(V))) < 0.3
    assert abs(out["nsp_loss"].item() - math.log(2)) < 0.1
    assert torch.allclose(out["loss"], out["mlm_loss"] + out["nsp_loss"])


def test_bert_padding_is_invisible():
    """Whatever sits in padded positions (ids, segments) never changes real outputs."""
    model, batch = bert_tiny(), bert_batch()
    noisy = dict(batch)
    pad = ~batch["attention_mask"]
    noisy["input_ids"] = torch.where(pad, torch.randint(5, V, (B, L)), batch["input_ids"])
    noisy["token_type_ids"] = torch.where(pad, 1, batch["token_type_ids"])
    with torch.no_grad():
        a, b = model(**batch), model(**noisy)
    assert torch.allclose(a["mlm_logits"], b["mlm_logits"], atol=1e-5)
    assert torch.allclose(a["nsp_logits"], b["nsp_logits"], atol=1e-5)


def test_bert_zero_weight_predictions_do_not_count():
    model, batch = bert_tiny(), bert_batch()
    other = dict(batch, masked_lm_ids=torch.where(batch["masked_lm_weights"] > 0, batch["masked_lm_ids"], 7))
    with torch.no_grad():
        assert model(**batch)["mlm_loss"].item() == pytest.approx(model(**other)["mlm_loss"].item(), abs=1e-6)


def test_bert_decoder_is_tied_to_embedding():
    model, batch = bert_tiny(), bert_batch()
    out = model(**batch)
    out["mlm_loss"].backward()
    row = batch["masked_lm_ids"][0, 0]
    assert model.wte.weight.grad[row].abs().sum() > 0  # the decoder's gradient lands on the input table
    assert not any(p is model.wte.weight for name, p in model.named_parameters() if name != "wte.weight")


def test_gpt_is_causal():
    model = gpt_tiny()
    idx = torch.randint(0, V, (2, 24))
    changed = idx.clone()
    changed[:, 12:] = torch.randint(0, V, (2, 12))
    with torch.no_grad():
        a, b = model(idx)["logits"], model(changed)["logits"]
    assert torch.allclose(a[:, :12], b[:, :12], atol=1e-5)
    assert not torch.allclose(a[:, 12:], b[:, 12:], atol=1e-3)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 17), min_size=1, max_size=6))
def test_gpt_targets_ignore_padding(lengths):
    T = 17
    ids = torch.arange(T).repeat(len(lengths), 1)
    xy = gpt_inputs(ids, torch.tensor(lengths))
    assert torch.equal(xy["idx"], ids[:, :-1])
    for row, n in enumerate(lengths):
        assert xy["targets"][row, : n - 1].tolist() == list(range(1, n))  # next tokens of real positions
        assert (xy["targets"][row, n - 1 :] == -100).all()


def test_gpt_initial_loss_near_uniform():
    idx = torch.randint(0, V, (2, 65))
    out = gpt_tiny()(**gpt_inputs(idx, torch.tensor([65, 40])))
    assert abs(out["loss"].item() - math.log(padded_vocab_size(V))) < 0.3


@pytest.mark.parametrize(
    ("name", "hf"),
    [
        ("bert-base", lambda: BertForPreTraining(BertConfig(vocab_size=30528))),
        ("gpt2-124M", lambda: GPT2LMHeadModel(GPT2Config(vocab_size=50304))),
    ],
)
def test_parameter_count_equals_transformers(name, hf):
    """Same architecture, same parameters: bert-base 110M and GPT-2 124M as published (tied decoders)."""
    with torch.device("meta"):
        ours = build_model(model_config(name, 30522 if name.startswith("bert") else 50257))
        theirs = hf()
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())
    assert count_params(ours) < sum(p.numel() for p in ours.parameters())


@given(st.integers(1, 200_000))
def test_vocab_padded_to_multiple_of_64(size):
    padded = padded_vocab_size(size)
    assert padded % 64 == 0 and size <= padded < size + 64


def test_sizes_match_the_papers():
    assert [(s.n_layer, s.n_embd, s.n_head) for n, s in SIZES.items() if n.startswith("bert")] == [
        (2, 128, 2),
        (4, 256, 4),
        (4, 512, 8),
        (8, 512, 8),
        (12, 768, 12),
    ]
    assert SIZES["gpt2-124M"].max_positions == 1024


@pytest.mark.parametrize("task", ["bert", "gpt"])
def test_schedule_warms_up_then_decays(task):
    r = recipe(task, steps=1000)
    assert r.warmup_steps == 10  # 1% of the run, as BERT's 10k of 1M
    factors = [lr_factor(s, 1000, r) for s in range(1000)]
    assert factors[:10] == pytest.approx([(s + 1) / 10 for s in range(10)])
    assert all(a >= b for a, b in zip(factors[10:], factors[11:]))
    assert factors[-1] == pytest.approx(0.0 if task == "bert" else 0.1, abs=2e-3)  # linear to 0, cosine to lr/10
    assert r.lr == (1e-4 if task == "bert" else 6e-4)


def test_weight_decay_skips_biases_and_norms():
    model = bert_tiny()
    optimizer = make_optimizer(model, recipe("bert", 10), torch.device("cpu"))
    decayed, plain = optimizer.param_groups
    names = {id(p): n for n, p in model.named_parameters()}
    assert decayed["weight_decay"] == 0.01 and plain["weight_decay"] == 0.0
    assert {names[id(p)] for p in plain["params"]} >= {"ln_emb.weight", "ln_emb.bias", "mlm_bias", "h.0.ln_1.weight"}
    assert all(p.dim() == 2 for p in decayed["params"]) and "wte.weight" in {names[id(p)] for p in decayed["params"]}

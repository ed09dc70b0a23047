"""Export a checkpoint as a transformers directory (BertForPreTraining / GPT2LMHeadModel).

Our parameter names are nanoGPT's, so the mapping is a rename, a split of the fused query/key/value
projection (BERT) or a transpose into GPT-2's Conv1D [in, out] layout, and a slice of the embedding
back to the tokenizer's real vocabulary (training pads it to a multiple of 64). Tied decoder weights
are left out: transformers ties them to the input embedding on load.

An export only ever writes into a missing or empty folder, or over a previous export with
``force``: ``export.json`` lists what the export wrote, and a folder holding anything else is refused,
so nothing the export did not write is ever deleted.
"""

from __future__ import annotations

import json
import os

import torch
from transformers import BertConfig, GPT2Config

from corpusforge.core import storage
from corpusforge.trainer.checkpoint import WEIGHTS_NAME, read_state, read_weights, resolve_checkpoint, run_tokenizer, write_weights
from corpusforge.trainer.models import ModelConfig

BERT_TOKENS = {"pad": "pad_token", "unk": "unk_token", "cls": "cls_token", "sep": "sep_token", "mask": "mask_token"}


def bert_to_hf(w: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    V = cfg.real_vocab_size
    out = {
        "bert.embeddings.word_embeddings.weight": w["wte.weight"][:V],
        "bert.embeddings.position_embeddings.weight": w["wpe.weight"],
        "bert.embeddings.token_type_embeddings.weight": w["wtt.weight"],
        "bert.embeddings.LayerNorm.weight": w["ln_emb.weight"],
        "bert.embeddings.LayerNorm.bias": w["ln_emb.bias"],
        "bert.pooler.dense.weight": w["pooler.weight"],
        "bert.pooler.dense.bias": w["pooler.bias"],
        "cls.predictions.transform.dense.weight": w["mlm_dense.weight"],
        "cls.predictions.transform.dense.bias": w["mlm_dense.bias"],
        "cls.predictions.transform.LayerNorm.weight": w["mlm_ln.weight"],
        "cls.predictions.transform.LayerNorm.bias": w["mlm_ln.bias"],
        "cls.predictions.bias": w["mlm_bias"][:V],
        "cls.seq_relationship.weight": w["nsp.weight"],
        "cls.seq_relationship.bias": w["nsp.bias"],
    }
    for i in range(cfg.n_layer):
        ours, theirs = f"h.{i}.", f"bert.encoder.layer.{i}."
        for kind in ("weight", "bias"):
            q, k, v = w[f"{ours}attn.c_attn.{kind}"].chunk(3, dim=0)
            out[f"{theirs}attention.self.query.{kind}"] = q
            out[f"{theirs}attention.self.key.{kind}"] = k
            out[f"{theirs}attention.self.value.{kind}"] = v
            out[f"{theirs}attention.output.dense.{kind}"] = w[f"{ours}attn.c_proj.{kind}"]
            out[f"{theirs}attention.output.LayerNorm.{kind}"] = w[f"{ours}ln_1.{kind}"]
            out[f"{theirs}intermediate.dense.{kind}"] = w[f"{ours}mlp.c_fc.{kind}"]
            out[f"{theirs}output.dense.{kind}"] = w[f"{ours}mlp.c_proj.{kind}"]
            out[f"{theirs}output.LayerNorm.{kind}"] = w[f"{ours}ln_2.{kind}"]
    return out


def gpt_to_hf(w: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    out = {
        "transformer.wte.weight": w["wte.weight"][: cfg.real_vocab_size],
        "transformer.wpe.weight": w["wpe.weight"],
        "transformer.ln_f.weight": w["ln_f.weight"],
        "transformer.ln_f.bias": w["ln_f.bias"],
    }
    for i in range(cfg.n_layer):
        prefix = f"h.{i}."
        for name in ("ln_1", "ln_2"):
            for kind in ("weight", "bias"):
                out[f"transformer.{prefix}{name}.{kind}"] = w[f"{prefix}{name}.{kind}"]
        for name in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
            out[f"transformer.{prefix}{name}.weight"] = w[f"{prefix}{name}.weight"].t()  # Conv1D is [in, out]
            out[f"transformer.{prefix}{name}.bias"] = w[f"{prefix}{name}.bias"]
    return out


def hf_config(cfg: ModelConfig, special_ids: dict[str, int]) -> BertConfig | GPT2Config:
    if cfg.family == "bert":
        return BertConfig(
            vocab_size=cfg.real_vocab_size,
            hidden_size=cfg.n_embd,
            num_hidden_layers=cfg.n_layer,
            num_attention_heads=cfg.n_head,
            intermediate_size=4 * cfg.n_embd,
            hidden_act="gelu",
            hidden_dropout_prob=cfg.dropout,
            attention_probs_dropout_prob=cfg.dropout,
            max_position_embeddings=cfg.max_positions,
            type_vocab_size=cfg.type_vocab_size,
            layer_norm_eps=cfg.ln_eps,
            pad_token_id=special_ids.get("pad", 0),
            tie_word_embeddings=True,
            architectures=["BertForPreTraining"],
        )
    eot = special_ids.get("eot", cfg.real_vocab_size - 1)
    return GPT2Config(
        vocab_size=cfg.real_vocab_size,
        n_positions=cfg.max_positions,
        n_embd=cfg.n_embd,
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        activation_function="gelu_new",
        layer_norm_epsilon=cfg.ln_eps,
        resid_pdrop=cfg.dropout,
        embd_pdrop=cfg.dropout,
        attn_pdrop=cfg.dropout,
        bos_token_id=eot,
        eos_token_id=eot,
        tie_word_embeddings=True,
        architectures=["GPT2LMHeadModel"],
    )


def save_tokenizer(vocab: dict, family: str, out_dir: storage.PathLike, max_length: int) -> None:
    """The shards' tokenizer.json with a tokenizer_config.json that every transformers version reads.

    The class is named explicitly (BertTokenizerFast / GPT2TokenizerFast: transformers 4.x resolves them,
    5.x maps them to its unified classes), rather than what ``save_pretrained`` writes under 5.x
    ("TokenizersBackend", unknown to 4.x). ``model_max_length`` is the model's position count; GPT-2
    has no padding token of its own, so <|endoftext|> pads (the usual choice, and what our shards pad with).
    """
    tokenizer = run_tokenizer(vocab)
    folder = vocab["path"] if storage.is_dir(vocab["path"]) else storage.parent(vocab["path"])
    special = vocab["special_ids"]
    if family == "bert":
        names = {BERT_TOKENS[k]: tokenizer.id_to_token(i) for k, i in special.items() if k in BERT_TOKENS}
        normalizer = json.loads(tokenizer.to_str())["normalizer"] or {}  # BertTokenizerFast rebuilds a normalizer that disagrees
        settings = {
            "tokenizer_class": "BertTokenizerFast",
            "do_lower_case": normalizer.get("lowercase", False),
            "strip_accents": normalizer.get("strip_accents"),
        }
    else:
        eot = tokenizer.id_to_token(special["eot"])
        names = {"bos_token": eot, "eos_token": eot, "unk_token": eot, "pad_token": eot}
        settings = {"tokenizer_class": "GPT2TokenizerFast", "add_prefix_space": False}
    storage.write_text(storage.join(out_dir, "tokenizer.json"), tokenizer.to_str(pretty=True))  # what Tokenizer.save writes
    config = {**settings, **names, "model_max_length": max_length, "clean_up_tokenization_spaces": False}
    storage.write_json(storage.join(out_dir, "tokenizer_config.json"), config)
    storage.write_json(storage.join(out_dir, "special_tokens_map.json"), names)
    for name in ("vocab.txt", "vocab.json", "merges.txt"):  # the slow tokenizers' files, when the vocab has them
        if storage.is_file(storage.join(folder, name)):
            storage.write_bytes(storage.join(out_dir, name), storage.read_bytes(storage.join(folder, name)))


EXPORT_RECORD = "export.json"


def check_target(out_dir: str, force: bool) -> list[str]:
    """What an export into ``out_dir`` may replace: nothing, or (with ``force``) the files a previous export wrote.

    Raises ValueError, naming a file, for a folder that is neither empty nor a previous export, or
    that holds files the previous export did not write.
    """
    if storage.is_file(out_dir):
        raise ValueError(f"{out_dir}: exists and is not a folder")
    present = [storage.name(p) for p in storage.listdir(out_dir)]
    if not present:
        return []
    record = storage.join(out_dir, EXPORT_RECORD)
    if not storage.is_file(record):
        raise ValueError(f"{out_dir}: not empty and not a previous export (holds {present[0]}); choose an empty or new folder")
    if not force:
        raise ValueError(f"{out_dir}: holds a previous export; pass --force to replace it")
    written = set(storage.read_json(record)["files"]) | {EXPORT_RECORD}
    foreign = [name for name in present if name not in written]
    if foreign:
        raise ValueError(
            f"{storage.join(out_dir, foreign[0])}: not written by the previous export; it is left alone, so the export is refused"
        )
    return [storage.join(out_dir, name) for name in present]


def export_hf(checkpoint: storage.PathLike, out_dir: storage.PathLike, force: bool = False) -> str:
    """Write ``out_dir`` (config.json, model.safetensors, tokenizer files, export.json) whole or not at all.

    transformers and safetensors write by path, so the export is assembled in a local temporary folder
    (``storage.local_output``), renamed into place locally and uploaded to a URI.
    """
    out_dir = os.fspath(out_dir)
    replaced = check_target(out_dir, force)
    ckpt = resolve_checkpoint(checkpoint)
    state = read_state(ckpt)
    cfg = ModelConfig(**state["model_config"])
    if cfg.pre_ln:
        raise ValueError(f"{ckpt}: a pre-LN BERT has no transformers counterpart; train with pre_ln=false to export")
    weights = read_weights(storage.join(ckpt, WEIGHTS_NAME))
    tensors = bert_to_hf(weights, cfg) if cfg.family == "bert" else gpt_to_hf(weights, cfg)
    tensors = {name: t.contiguous().clone() for name, t in tensors.items()}

    with storage.local_output(out_dir) as tmp:
        storage.makedirs(tmp)
        write_weights(os.path.join(tmp, "model.safetensors"), tensors)
        hf_config(cfg, state["vocab"]["special_ids"]).save_pretrained(tmp)
        save_tokenizer(state["vocab"], cfg.family, tmp, cfg.max_positions)
        files = [storage.name(p) for p in storage.listdir(tmp)]
        weights_sha256 = storage.sha256(storage.join(ckpt, WEIGHTS_NAME))
        checkpoint_id = {"path": storage.resolve(ckpt), "step": state.get("step"), "sha256": weights_sha256}
        storage.write_json(os.path.join(tmp, EXPORT_RECORD), {"files": files, "checkpoint": checkpoint_id})
        for path in replaced:  # only a previous export's own files (check_target); a rename replaces the emptied folder
            storage.remove(path)
    return out_dir

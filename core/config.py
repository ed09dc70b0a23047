"""The one typed configuration for every stage, loaded from TOML with ``--set key=value`` overrides.

Defaults follow the published recipes (BERT, GPT-2/WebText); each section belongs to one stage.
Relative paths in a configuration file are resolved against that file's directory.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from corpusforge.core import storage

Precision = Literal["auto", "fp32", "bf16"]  # of the trainer's arithmetic; trainer/device.py says what auto picks
PRECISION_HELP = "bf16 autocast (weights stay fp32) or fp32; auto: bf16 on CUDA and on CPUs with AMX, else fp32"


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class RunConfig(Section):
    output_dir: str = Field(
        "out",
        description="where documents, rejects, vocab, shards, train runs, manifest.json and report.html go: a folder (relative to the working directory) or a URI (s3://bucket/run)",
    )
    temp_location: str | None = Field(
        None,
        description="spill, shuffle and sort files of running stages, removed when each ends: a folder or URI every worker can reach; unset: <output_dir>/.work",
    )
    stages: list[str] = Field(
        default_factory=lambda: ["books", "wikipedia", "clean", "dedup", "documents"],
        description="stages to run, in pipeline order; any of books, wikipedia, webtext, records, clean, dedup, near_dedup, documents, vocab, bert, gpt, train",
    )
    seed: int = Field(12345, description="seed of every random choice in the build (masking, pairing, shuffles)")
    # Beam: "DirectRunner" runs on pipeline/local_runner.py (Beam's own would first try to download and run Prism).
    runner: str = Field(
        "DirectRunner",
        description="Beam runner: DirectRunner (local: Beam's batch runner, never its Prism), DaskRunner, FlinkRunner, SparkRunner, DataflowRunner",
    )
    # "auto": a stage with a small input runs in this process (a worker process's start, mostly importing Beam,
    # costs more than it saves there), a larger one gets a worker process per core; all modes write the same bytes
    direct_running_mode: Literal["auto", "in_memory", "multi_threading", "multi_processing"] = Field(
        "auto",
        description="DirectRunner mode: auto (in_memory for a stage whose input is under run.in_process_bytes, else multi_processing), multi_processing (a worker process per core), multi_threading, or in_memory (this process); all write the same bytes",
    )
    in_process_bytes: int = Field(
        16 << 20,
        ge=0,
        description="auto mode: a stage reading less text than this runs in this process (inputs: compressed files count 4x; examples stages: the documents' text)",
    )
    direct_num_workers: int = Field(0, ge=0, description="DirectRunner workers; 0: one per core")
    beam_args: list[str] = Field(
        default_factory=list, description="extra Beam pipeline options passed through verbatim (--project, --temp_location, ...)"
    )
    part_bytes: int = Field(
        128 << 20, ge=1, description="text bytes per documents Parquet part: parts = ceil(bytes / this), split by id hash"
    )
    reject_parts: int = Field(4, ge=1, description="Parquet files of rejects (~100 bytes a record), split by id hash")
    lock_lease_s: float = Field(
        120.0,
        gt=0,
        description="on an object store: a build lock not renewed for this long was left by a killed launcher and is taken over",
    )


class BooksConfig(Section):
    paths: list[str] = Field(
        default_factory=list, description="folders of books (searched recursively); relative to the configuration file"
    )
    extensions: list[str] = Field(default_factory=lambda: [".txt", ".epub"], description="file extensions read as books")


class WikipediaConfig(Section):
    # .xml, .xml.bz2, or multistream .xml.bz2 (its "-index.txt.bz2" found beside it or given in index_paths)
    paths: list[str] = Field(
        default_factory=list,
        description="pages-articles dumps: .xml, .xml.bz2 or multistream .xml.bz2 (its -index.txt.bz2 found beside it)",
    )
    index_paths: list[str] = Field(default_factory=list, description="multistream index files, when not beside their dump")
    streams_per_range: int = Field(
        100, description="multistream bz2 streams per parallel byte range (fewer when the dump would give under 32 ranges)"
    )
    keep_headings: bool = Field(True, description="keep section headings, each as its own paragraph")
    drop_disambiguation: bool = Field(True, description="reject disambiguation pages (reason: disambiguation)")


class CleanConfig(Section):
    fix_unicode: bool = Field(True, description="repair mojibake and odd Unicode with ftfy")
    min_words: int = Field(20, description="documents with fewer words are rejected (reason: too_short)")
    language: str | None = Field(None, description='ISO 639-1 code to keep, e.g. "en"; unset keeps every language')
    language_min_confidence: float = Field(0.0, description="py3langid confidence below which a document counts as another language")
    decontaminate: list[str] = Field(
        default_factory=list,
        description="evaluation files (GLUE .tsv, .jsonl, text lines): documents sharing a word n-gram with one of their texts "
        "are rejected (reason: contaminated)",
    )
    decontaminate_ngram: int = Field(13, ge=1, description="words per n-gram of that check (GPT-3's 13)")
    decontaminate_min_words: int = Field(
        8, ge=1, description="evaluation fields with fewer words are not texts (labels, ids); shorter than the n-gram: matched whole"
    )


class DedupConfig(Section):
    exact: bool = Field(True, description="drop exact duplicates (on normalised text), keeping one per group")


class NearDedupConfig(Section):
    threshold: float = Field(0.8, description="Jaccard similarity of word n-gram sets above which documents are near-duplicates")
    num_perm: int = Field(128, description="MinHash permutations per signature")
    ngram: int = Field(5, description="words per shingle")
    verify: bool = Field(True, description="check every LSH candidate pair's exact Jaccard similarity before removing")
    seed: int = Field(1, description="MinHash permutation seed")
    # "wordmix": vectorised base hash (signatures equal datasketch's with hashfunc=corpora.minhash.wordmix_hash32);
    # "sha1": datasketch's default base hash, bit-identical to MinHash(num_perm, seed) signatures, ~3x slower
    base_hash: Literal["wordmix", "sha1"] = Field(
        "wordmix", description="wordmix: fast vectorised base hash; sha1: datasketch's default (bit-identical signatures, ~3x slower)"
    )
    # LSH bands x rows; None: datasketch's _optimal_param for threshold and num_perm with this weight on
    # false negatives (1 - it on false positives): candidates are verified, so a false positive costs one comparison
    false_negative_weight: float = Field(
        0.9, description="weight on false negatives when choosing LSH bands x rows (candidates are verified, so false positives are cheap)"
    )
    bands: int | None = Field(None, description="LSH bands; unset: datasketch's optimum for threshold and num_perm")
    rows: int | None = Field(None, description="LSH rows per band; unset: datasketch's optimum")
    # each round is two shuffles of every node: 8 rounds cost 1.16x the documents job's CPU of 4 on 100 MB of 400 B
    # pages, for the same bytes; at 300 MB the residual 4 rounds leave did not raise the largest worker (590 MB)
    max_component_rounds: int = Field(
        4,
        description="label-propagation rounds of the connected components (a chain of about 2^rounds documents settles;"
        " a component found whole leaves the rounds); the edges left are resolved exactly by a union-find in one worker",
    )
    wikipedia_domains: list[str] = Field(
        default_factory=lambda: ["wikipedia.org", "wikiwand.com", "wikizero.com", "wiki2.org", "wikimili.com", "dbpedia.org"],
        description="WebText pages on these hosts (and subdomains) are dropped when Wikipedia is built too",
    )


class VocabConfig(Section):
    kinds: list[Literal["wordpiece", "bpe"]] = Field(
        default_factory=lambda: ["wordpiece", "bpe"], description="vocabularies to train: wordpiece (BERT) and/or bpe (GPT-2 byte-level)"
    )
    wordpiece_vocab_size: int = Field(
        30522, description="requested WordPiece size (bert-base-uncased: 30,522); a small corpus stops earlier"
    )
    lowercase: bool = Field(True, description="uncased WordPiece: lowercase and strip accents")
    bpe_vocab_size: int = Field(50257, description="requested BPE size (GPT-2: 50,257); a small corpus stops earlier")
    min_frequency: int = Field(2, description="pairs seen fewer times are never merged")
    sample_bytes: int = Field(200_000_000, description="text bytes of the deterministic document sample the vocabularies are trained on")
    sample_seed: int = Field(42, description="seed of that sample")


class BertConfig(Section):
    max_seq_length: int = Field(128, description="tokens per example, [CLS] and [SEP]s included")
    max_predictions_per_seq: int = Field(20, description="masked positions per example at most")
    masked_lm_prob: float = Field(0.15, description="fraction of tokens masked (80% [MASK], 10% random, 10% unchanged)")
    short_seq_prob: float = Field(0.1, description="probability of a shorter target length (as create_pretraining_data.py)")
    dupe_factor: int = Field(5, description="passes over the data, each with different masks")
    random_next_prob: float = Field(0.5, description="probability that segment B is a random segment (NSP label 1)")
    whole_word_mask: bool = Field(False, description="mask all pieces of a word together")
    partner_bucket_size: int = Field(256, description="documents per bucket that random NSP partners are drawn from, at most")
    partner_bucket_bytes: int = Field(
        32 << 20,
        ge=1,
        description="text per partner bucket, about, and per group of smaller buckets spilled together: a worker holds that much text's tokens",
    )


class GptConfig(Section):
    seq_len: int = Field(1024, description="tokens per training window (GPT-2: 1024); shards hold seq_len + 1")
    keep_tail: bool = Field(True, description="pad and flag the final partial window instead of dropping it (dropped ones are counted)")
    docs_per_bucket: int = Field(4096, description="documents per token stream at most; each bucket has its own tail")
    bucket_bytes: int = Field(64 << 20, ge=1, description="text per token stream, about: a worker holds one stream's tokens")


class ShardsConfig(Section):
    target_bytes: int = Field(256 * 1024 * 1024, description="bytes per shard file, about")
    max_examples: int | None = Field(None, description="examples per shard at most; unset: no limit")
    compression: Literal["none", "lz4", "zstd"] = Field(
        "none", description="Arrow IPC compression: none (memory-mapped, zero-copy), lz4 or zstd"
    )
    sort_bucket_bytes: int = Field(64 * 1024 * 1024, description="bytes per global-shuffle bucket, sorted in one worker's memory")


class TrainConfig(Section):
    task: Literal["bert", "gpt"] = Field("bert", description="bert or gpt; set from the model's family")
    model: str = Field("bert-mini", description="model size: bert-tiny|mini|small|medium|base, gpt-tiny|small, gpt2-124M")
    steps: int = Field(1000, description="optimizer steps")
    batch_size: int = Field(32, description="examples per micro-batch per process")
    global_batch_size: int | None = Field(
        None, description="examples per optimizer step (gradient accumulation); unset: batch_size x processes"
    )
    lr: float | None = Field(None, description="peak learning rate; unset: the family's recipe")
    warmup_steps: int | None = Field(None, description="linear warm-up steps; unset: 1% of the steps")
    weight_decay: float | None = Field(None, description="AdamW weight decay; unset: recipe (BERT 0.01, GPT 0.1)")
    grad_clip: float = Field(1.0, description="gradient norm clipping")
    num_workers: int = Field(2, description="data loader worker processes")
    log_every: int = Field(10, description="steps between metrics lines")
    checkpoint_every: int = Field(500, description="steps between checkpoints (and one at the end)")
    compile: bool = Field(True, description="torch.compile on CUDA (never on CPU)")
    seed: int = Field(0, description="seed of initialisation, dropout and data order")
    dropout: float | None = Field(None, description="dropout; unset: 0.1 for BERT (paper), 0.0 for GPT (nanoGPT)")
    pre_ln: bool = Field(False, description="BERT with a pre-LN encoder instead of the paper's post-LN (not exportable to transformers)")
    precision: Precision = Field("auto", description=PRECISION_HELP)
    eval_batches: int | None = Field(
        None, ge=1, description="cap on held-out batches per process in one evaluation; unset: every held-out example"
    )
    holdout_examples: int = Field(1000, ge=0, description="without eval shards: the last min(this, N // 10) examples are held out; 0: none")
    verify_shards: bool = Field(True, description="check every shard's size, sha256 and schema before training")
    vocab: str | None = Field(
        None, description="vocabulary directory or tokenizer.json when the shards were moved without the one their manifest names"
    )
    eval_every: int = Field(0, ge=0, description="evaluate the whole held-out set every this many steps; 0: only at the end")
    keep_checkpoints: int = Field(3, ge=0, description="newest step checkpoints kept in the run directory; 0: all")


class FinetuneConfig(Section):
    """GLUE fine-tuning: the BERT paper's recipe (appendix A.3) as the BERT miniatures use it for small models."""

    task: Literal["sst2", "cola", "mrpc"] = Field("sst2", description="GLUE task")
    epochs: int = Field(3, ge=1, description="passes over the training set")
    lr: float = Field(1e-4, gt=0, description="peak learning rate; the miniatures' grid is 1e-4, 5e-5, 3e-5 (1e-4 suits tiny/mini)")
    batch_size: int = Field(32, ge=1, description="examples per step")
    max_seq_length: int = Field(128, ge=8, description="tokens per example, [CLS] and [SEP]s included")
    warmup_fraction: float = Field(0.1, ge=0, lt=1, description="linear warm-up over this share of the steps, then linear decay to 0")
    weight_decay: float = Field(0.01, description="AdamW weight decay")
    dropout: float = Field(0.1, ge=0, lt=1, description="dropout in the encoder and before the classifier")
    max_train_examples: int | None = Field(None, ge=1, description="train on a seeded subset of this many examples, in file order")
    seed: int = Field(0, description="seed of the classifier, data order, dropout and subset")
    random_init: bool = Field(False, description="same architecture and vocabulary, no pre-trained weights: the baseline")
    precision: Precision = Field("auto", description=PRECISION_HELP)


class FetchConfig(Section):
    """Polite, bounded fetching (OpenWebText2's scraper limits: short timeouts, HTML only)."""

    user_agent: str = Field("corpusforge/0.1 (+https://github.com/corpusforge)", description="User-Agent header of every request")
    concurrency: int = Field(64, description="requests in flight per worker")
    per_host_concurrency: int = Field(2, description="requests in flight per host")
    per_host_delay_s: float = Field(1.0, description="minimum gap between request starts on one host")
    max_crawl_delay_s: float = Field(10.0, description="robots.txt Crawl-delay is honoured up to this")
    connect_timeout_s: float = Field(10.0, description="TCP/TLS connect timeout")
    read_timeout_s: float = Field(20.0, description="timeout between received bytes")
    total_timeout_s: float = Field(60.0, description="one request, body included")
    url_deadline_s: float = Field(120.0, description="one URL, redirects and retries included")
    max_body_bytes: int = Field(5_000_000, description="raw bytes on the wire per response at most")
    max_decoded_bytes: int = Field(20_000_000, description="bytes after Content-Encoding at most (decompression-bomb cap)")
    max_redirects: int = Field(5, description="redirects followed per URL")
    retries: int = Field(2, description="retries on 429, 5xx and connection errors")
    backoff_s: float = Field(1.0, description="first retry delay, doubled per retry")
    max_retry_after_s: float = Field(30.0, description="a Retry-After longer than this gives up on the URL")
    respect_robots: bool = Field(True, description="obey robots.txt")
    content_types: list[str] = Field(
        default_factory=lambda: ["text/html", "application/xhtml+xml"], description="response content types kept"
    )
    allow_hosts: list[str] = Field(default_factory=list, description="hosts exempt from the private-address refusal")
    allow_networks: list[str] = Field(
        default_factory=list, description="CIDRs exempt from the private-address refusal, e.g. 127.0.0.1/32 for tests"
    )
    batch_size: int = Field(256, description="URLs per fetch batch (one WARC file each)")


class ExtractConfig(Section):
    """WebText main-content extraction and Gopher-style quality filters (Rae et al. 2021, appendix A)."""

    timeout_s: float = Field(10.0, description="per page; a page over it is rejected and its worker process restarted")
    favor: Literal["precision", "balanced", "recall"] = Field(
        "balanced", description="trafilatura's trade-off: precision, balanced (its default) or recall"
    )
    include_tables: bool = Field(True, description="keep table text (recipes, fact boxes)")
    fast: bool = Field(True, description="false adds readability/jusText comparison: F1 +0.006 on the evaluation set, ~1.75x the CPU")
    navigation_fallback: bool = Field(True, description="retry with fast=false when the fast path returns the site's menu")
    lead_from_description: bool = Field(
        False, description="prepend a visible, host-unique meta description the extraction lacks (off: it cost F1 on full-text pages)"
    )
    fix_unicode: bool = Field(True, description="repair odd Unicode with ftfy")
    languages: list[str] = Field(default_factory=lambda: ["en"], description="ISO 639-1 codes kept; empty keeps every language")
    min_language_confidence: float = Field(0.5, description="py3langid confidence needed")
    min_words: int = Field(100, description="pages with fewer words are rejected (~128 GPT-2 tokens)")
    max_words: int = Field(100_000, description="pages with more words are rejected")
    min_mean_word_length: float = Field(3.0, description="Gopher filter: mean word length at least")
    max_mean_word_length: float = Field(10.0, description="Gopher filter: mean word length at most")
    max_symbol_word_ratio: float = Field(0.1, description="Gopher filter: '#' and '...' per word at most")
    max_ellipsis_line_fraction: float = Field(0.3, description="Gopher filter: lines ending in an ellipsis at most")
    min_alpha_word_fraction: float = Field(0.8, description="Gopher filter: words with a letter at least")


class RecordsConfig(Section):
    """Documents that are already text: JSON lines, Parquet, or folders written by HF ``datasets``' ``save_to_disk``."""

    paths: list[str] = Field(
        default_factory=list,
        description="files or folders: .jsonl/.json (optionally .gz, .zst, .xz or .bz2), .parquet, or a datasets save_to_disk folder; relative to the configuration file",
    )
    text_field: str = Field("text", description="the field holding each record's text")
    id_field: str | None = Field(
        None,
        description="the field holding a stable record key; unset: the entry's name (without format suffixes) and the record's position in it",
    )
    title_field: str | None = Field(None, description="the field holding a title, if any")


class WebTextConfig(Section):
    dumps: list[str] = Field(default_factory=list, description="Pushshift submission dumps RS_*.{zst,xz,bz2,gz,ndjson}")
    karma_mode: Literal["sum", "single"] = Field(
        "sum", description="sum: karma summed per canonical URL (OpenWebText2); single: one post's karma (OpenWebText)"
    )
    min_karma: int = Field(3, description="URLs with less karma are skipped")
    exclude_over_18: bool = Field(False, description="skip posts marked over_18")
    offline: bool = Field(False, description="build only from WARCs already captured, fetch nothing")
    warc_dir: str | None = Field(None, description="WARC capture folder; unset: <run.output_dir>/webtext/warc")
    extra_blocked_domains: list[str] = Field(default_factory=list, description="domains blocked besides the bundled list")
    extra_blocked_extensions: list[str] = Field(default_factory=list, description="URL file extensions blocked besides the bundled list")
    fetch: FetchConfig = Field(default_factory=FetchConfig, description="fetching limits")
    extract: ExtractConfig = Field(default_factory=ExtractConfig, description="extraction and quality filters")


class Config(Section):
    run: RunConfig = Field(default_factory=RunConfig, description="output folder, stages, Beam runner")
    books: BooksConfig = Field(default_factory=BooksConfig, description="books stage")
    wikipedia: WikipediaConfig = Field(default_factory=WikipediaConfig, description="wikipedia stage")
    webtext: WebTextConfig = Field(default_factory=WebTextConfig, description="webtext stage")
    records: RecordsConfig = Field(default_factory=RecordsConfig, description="records stage")
    clean: CleanConfig = Field(default_factory=CleanConfig, description="clean stage")
    dedup: DedupConfig = Field(default_factory=DedupConfig, description="dedup stage")
    near_dedup: NearDedupConfig = Field(default_factory=NearDedupConfig, description="near_dedup stage")
    vocab: VocabConfig = Field(default_factory=VocabConfig, description="vocab stage")
    bert: BertConfig = Field(default_factory=BertConfig, description="bert stage")
    gpt: GptConfig = Field(default_factory=GptConfig, description="gpt stage")
    shards: ShardsConfig = Field(default_factory=ShardsConfig, description="shard files of the bert and gpt stages")
    train: TrainConfig = Field(default_factory=TrainConfig, description="train stage and the train command")


def _parse_value(raw: str) -> Any:
    """A ``--set`` value is read as a TOML value when it parses as one, else as a plain string."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"--set expects key=value, got {item!r}")
        key, raw = item.split("=", 1)
        *parents, leaf = key.strip().split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = _parse_value(raw.strip())
    return data


def _resolve_paths(data: dict[str, Any], base: Path) -> None:
    """Make relative paths absolute against the configuration file's directory."""
    path_keys = {"paths", "index_paths", "dumps", "warc_dir", "decontaminate"}  # run.output_dir stays relative to the working directory
    for section in data.values():
        if not isinstance(section, dict):
            continue
        for key in path_keys & section.keys():
            value = section[key]
            if isinstance(value, list):
                section[key] = [_against(base, v) for v in value]
            elif isinstance(value, str):
                section[key] = _against(base, value)


def _against(base: Path, value: str) -> str:
    """A relative local path joined to the configuration's folder, ``..`` folded (``configs/../samples``
    reads as ``samples``); URIs as given."""
    return value if "://" in value else os.path.normpath(base / value)


def load_config(path: Path | None, overrides: list[str] | None = None) -> Config:
    data: dict[str, Any] = {}
    if path is not None:
        data = tomllib.loads(storage.read_text(path))
        _resolve_paths(data, Path(path).resolve().parent)
    data = apply_overrides(data, overrides or [])
    return Config.model_validate(data)

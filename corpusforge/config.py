"""The one typed configuration for every stage, loaded from TOML with ``--set key=value`` overrides.

Defaults follow the published recipes (BERT, GPT-2/WebText); each section belongs to one stage.
Relative paths in a configuration file are resolved against that file's directory.
"""
from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

ALL_STAGES = ("books", "wikipedia", "webtext", "clean", "dedup", "near_dedup", "documents", "vocab", "bert", "gpt", "train")


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class RunConfig(Section):
    output_dir: Path = Path("out")
    stages: list[str] = Field(default_factory=lambda: ["books", "wikipedia", "clean", "dedup", "documents"])
    seed: int = 12345
    # Beam: the in-process runner is pinned explicitly (Beam 2.68+ would otherwise try to download Prism).
    runner: str = "DirectRunner"
    direct_running_mode: Literal["in_memory", "multi_threading", "multi_processing"] = "in_memory"
    direct_num_workers: int = 1
    beam_args: list[str] = Field(default_factory=list)  # passed through verbatim (--project, --temp_location, ...)
    document_parts: int = Field(4, ge=1)  # Parquet files of documents (and of rejects), split by id hash

    @field_validator("stages")
    @classmethod
    def _known_stages(cls, stages: list[str]) -> list[str]:
        unknown = sorted(set(stages) - set(ALL_STAGES))
        if unknown:
            raise ValueError(f"unknown stage(s) {unknown}; known: {list(ALL_STAGES)}")
        return stages


class BooksConfig(Section):
    paths: list[Path] = Field(default_factory=list)
    extensions: list[str] = Field(default_factory=lambda: [".txt", ".epub"])


class WikipediaConfig(Section):
    # .xml, .xml.bz2, or multistream .xml.bz2 (its "-index.txt.bz2" found beside it or given in index_paths)
    paths: list[Path] = Field(default_factory=list)
    index_paths: list[Path] = Field(default_factory=list)
    streams_per_range: int = 100  # multistream bz2 streams per parallel byte range
    keep_headings: bool = True  # section headings kept as their own paragraph start
    drop_disambiguation: bool = True


class CleanConfig(Section):
    fix_unicode: bool = True  # ftfy
    min_words: int = 20
    language: str | None = None  # ISO 639-1 code, e.g. "en"; None keeps every language
    language_min_confidence: float = 0.0


class DedupConfig(Section):
    exact: bool = True  # exact duplicates on normalised text (hash)


class NearDedupConfig(Section):
    threshold: float = 0.8  # target Jaccard similarity
    num_perm: int = 128
    ngram: int = 5  # word n-gram shingles
    verify: bool = True  # exact Jaccard check of candidate pairs
    seed: int = 1
    # "wordmix": vectorised base hash (signatures equal datasketch's with hashfunc=corpora.minhash.wordmix_hash32);
    # "sha1": datasketch's default base hash, bit-identical to MinHash(num_perm, seed) signatures, ~3x slower
    base_hash: Literal["wordmix", "sha1"] = "wordmix"
    # LSH bands x rows; None: datasketch's _optimal_param for threshold and num_perm with this weight on
    # false negatives (1 - it on false positives): candidates are verified, so a false positive costs one comparison
    false_negative_weight: float = 0.9
    bands: int | None = None
    rows: int | None = None
    max_component_rounds: int = 8  # label propagation + pointer jumping rounds; the rest is resolved exactly
    wikipedia_domains: list[str] = Field(  # WebText docs on these hosts (and subdomains) are dropped
        default_factory=lambda: ["wikipedia.org", "wikiwand.com", "wikizero.com", "wiki2.org", "wikimili.com", "dbpedia.org"]
    )


class VocabConfig(Section):
    kinds: list[Literal["wordpiece", "bpe"]] = Field(default_factory=lambda: ["wordpiece", "bpe"])
    wordpiece_vocab_size: int = 30522
    lowercase: bool = True  # "uncased": lowercase + strip accents
    bpe_vocab_size: int = 50257
    min_frequency: int = 2
    sample_bytes: int = 200_000_000  # deterministic sample streamed from the documents
    sample_seed: int = 42


class BertConfig(Section):
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    dupe_factor: int = 5
    random_next_prob: float = 0.5
    whole_word_mask: bool = False
    partner_bucket_size: int = 256  # documents per random-partner bucket (see pipeline.bert_examples)


class GptConfig(Section):
    seq_len: int = 1024
    keep_tail: bool = True  # final partial window padded and flagged, else dropped (and counted)
    docs_per_bucket: int = 4096  # documents per token stream; each bucket has its own tail (pipeline.gpt_examples)


class ShardsConfig(Section):
    target_bytes: int = 256 * 1024 * 1024
    max_examples: int | None = None
    compression: Literal["none", "lz4", "zstd"] = "none"
    sort_bucket_bytes: int = 64 * 1024 * 1024  # examples per global-shuffle bucket, sorted in one worker's memory


class TrainConfig(Section):
    task: Literal["bert", "gpt"] = "bert"
    model: str = "bert-mini"
    steps: int = 1000
    batch_size: int = 32
    global_batch_size: int | None = None  # gradient accumulation target; None = batch_size x world size
    lr: float | None = None  # None: recipe default for the model family
    warmup_steps: int | None = None
    weight_decay: float | None = None  # None: recipe default (BERT 0.01, GPT 0.1)
    grad_clip: float = 1.0
    num_workers: int = 2
    log_every: int = 10
    checkpoint_every: int = 500
    compile: bool = True  # torch.compile on CUDA (never on CPU)
    seed: int = 0
    dropout: float | None = None  # None: 0.1 for BERT (paper), 0.0 for GPT (nanoGPT)
    pre_ln: bool = False  # BERT: pre-LN encoder instead of the paper's post-LN (not exportable to HF)
    eval_batches: int | None = Field(None, ge=1)  # cap on held-out batches per rank per evaluation; None: every held-out example
    holdout_examples: int = Field(1000, ge=0)  # without eval shards: the last min(this, N // 10) examples are held out; 0: none
    verify_shards: bool = True  # check every shard's size, sha256 and schema before training (shards.verify)
    eval_every: int = Field(0, ge=0)  # evaluate the held-out set every this many steps (0: only at the end)
    keep_checkpoints: int = Field(3, ge=0)  # newest step checkpoints kept in the run directory (0: all)


class FinetuneConfig(Section):
    """GLUE fine-tuning: the BERT paper's recipe (appendix A.3) as the BERT miniatures use it for small models."""

    task: Literal["sst2", "cola", "mrpc"] = "sst2"
    epochs: int = Field(3, ge=1)
    lr: float = Field(1e-4, gt=0)  # the miniatures' grid is {1e-4, 5e-5, 3e-5}; 1e-4 suits tiny/mini
    batch_size: int = Field(32, ge=1)
    max_seq_length: int = Field(128, ge=8)
    warmup_fraction: float = Field(0.1, ge=0, lt=1)  # linear warmup over 10% of the steps, then linear decay to 0
    weight_decay: float = 0.01
    dropout: float = Field(0.1, ge=0, lt=1)
    max_train_examples: int | None = Field(None, ge=1)  # a seeded subset of the training file, in file order
    seed: int = 0
    random_init: bool = False  # same architecture and vocabulary, no pre-trained weights: the baseline


class FetchConfig(Section):
    """Polite, bounded fetching (OpenWebText2's scraper limits: short timeouts, HTML only)."""

    user_agent: str = "corpusforge/0.1 (+https://github.com/corpusforge)"
    concurrency: int = 64  # requests in flight per worker
    per_host_concurrency: int = 2
    per_host_delay_s: float = 1.0  # minimum gap between request starts on one host
    max_crawl_delay_s: float = 10.0  # robots.txt Crawl-delay is honoured up to this
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 20.0
    total_timeout_s: float = 60.0  # one request, body included
    url_deadline_s: float = 120.0  # one URL, redirects and retries included
    max_body_bytes: int = 5_000_000  # raw bytes on the wire
    max_decoded_bytes: int = 20_000_000  # after Content-Encoding: decompression-bomb cap
    max_redirects: int = 5
    retries: int = 2  # on 429 / 5xx / connection errors
    backoff_s: float = 1.0  # doubled per retry
    max_retry_after_s: float = 30.0
    respect_robots: bool = True
    content_types: list[str] = Field(default_factory=lambda: ["text/html", "application/xhtml+xml"])
    allow_hosts: list[str] = Field(default_factory=list)  # hosts exempt from the private-address refusal
    allow_networks: list[str] = Field(default_factory=list)  # CIDRs exempt, e.g. "127.0.0.1/32" for tests
    batch_size: int = 256  # URLs per fetch batch (one WARC file each)


class ExtractConfig(Section):
    """WebText main-content extraction and Gopher-style quality filters (Rae et al. 2021, appendix A)."""

    timeout_s: float = 10.0  # per page; a page over it is rejected and its worker process restarted
    favor: Literal["precision", "balanced", "recall"] = "balanced"  # trafilatura's default and its evaluation setting
    include_tables: bool = True  # the annotated main text of many pages is in tables (recipes, fact boxes)
    fast: bool = True  # False adds readability/jusText comparison: F1 +0.006 on the evaluation set, ~1.75x the CPU
    lead_from_description: bool = True  # prepend <meta name=description> when the extraction lacks it (the page's lead)
    fix_unicode: bool = True  # ftfy
    languages: list[str] = Field(default_factory=lambda: ["en"])  # ISO 639-1 codes; empty keeps every language
    min_language_confidence: float = 0.5
    min_words: int = 100  # ~128 GPT-2 tokens (about 1.3 tokens per English word)
    max_words: int = 100_000
    min_mean_word_length: float = 3.0
    max_mean_word_length: float = 10.0
    max_symbol_word_ratio: float = 0.1  # "#" and "..." per word
    max_ellipsis_line_fraction: float = 0.3
    min_alpha_word_fraction: float = 0.8


class WebTextConfig(Section):
    dumps: list[Path] = Field(default_factory=list)  # Pushshift RS_*.{zst,xz,bz2,gz,ndjson}
    karma_mode: Literal["sum", "single"] = "sum"  # OpenWebText2 (sum per canonical URL) or OpenWebText
    min_karma: int = 3
    exclude_over_18: bool = False
    offline: bool = False  # build only from existing WARCs
    warc_dir: Path | None = None  # None: <run.output_dir>/webtext/warc
    extra_blocked_domains: list[str] = Field(default_factory=list)
    extra_blocked_extensions: list[str] = Field(default_factory=list)
    fetch: FetchConfig = Field(default_factory=FetchConfig)
    extract: ExtractConfig = Field(default_factory=ExtractConfig)


class Config(Section):
    run: RunConfig = Field(default_factory=RunConfig)
    books: BooksConfig = Field(default_factory=BooksConfig)
    wikipedia: WikipediaConfig = Field(default_factory=WikipediaConfig)
    webtext: WebTextConfig = Field(default_factory=WebTextConfig)
    clean: CleanConfig = Field(default_factory=CleanConfig)
    dedup: DedupConfig = Field(default_factory=DedupConfig)
    near_dedup: NearDedupConfig = Field(default_factory=NearDedupConfig)
    vocab: VocabConfig = Field(default_factory=VocabConfig)
    bert: BertConfig = Field(default_factory=BertConfig)
    gpt: GptConfig = Field(default_factory=GptConfig)
    shards: ShardsConfig = Field(default_factory=ShardsConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)


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
    path_keys = {"paths", "index_paths", "dumps", "warc_dir"}  # run.output_dir stays relative to the working directory
    for section in data.values():
        if not isinstance(section, dict):
            continue
        for key in path_keys & section.keys():
            value = section[key]
            if isinstance(value, list):
                section[key] = [str(base / v) for v in value]
            elif isinstance(value, str):
                section[key] = str(base / value)


def load_config(path: Path | None, overrides: list[str] | None = None) -> Config:
    data: dict[str, Any] = {}
    if path is not None:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        _resolve_paths(data, Path(path).resolve().parent)
    data = apply_overrides(data, overrides or [])
    return Config.model_validate(data)

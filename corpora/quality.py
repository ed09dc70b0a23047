"""Gopher-style quality heuristics for extracted web text (Rae et al. 2021, "Scaling Language Models",
appendix A.1.1), each a threshold in ``ExtractConfig`` and each drop a reject reason of its own.

Why these: they are cheap, language-light rules that remove what main-content extraction still lets
through -- link lists and navigation (short, few alphabetic words), code and tables (long or symbol-heavy
"words"), SEO and teaser pages (many lines cut off with an ellipsis).
"""

from __future__ import annotations

import re

from corpusforge.core.config import ExtractConfig

ELLIPSES = ("...", "\u2026")
_ALPHA_WORD = re.compile(r"\S*[^\W\d_]\S*")  # a whitespace-separated word with at least one letter


def quality_reject(text: str, cfg: ExtractConfig) -> str | None:
    """The first rule the text fails, as a snake_case reason, or None when it passes them all.

    ``min_words`` defaults to 100: GPT-2's BPE spends about 1.3 tokens per English word, so 100 words
    is the ~128-token floor; shorter pages are mostly stubs, error pages and link hubs.
    """
    words = text.split()
    if len(words) < cfg.min_words:
        return "too_short"
    if len(words) > cfg.max_words:
        return "too_long"
    mean_length = sum(map(len, words)) / len(words)
    if not cfg.min_mean_word_length <= mean_length <= cfg.max_mean_word_length:
        return "quality_word_length"
    symbols = text.count("#") + sum(text.count(e) for e in ELLIPSES)
    if symbols / len(words) > cfg.max_symbol_word_ratio:
        return "quality_symbol_ratio"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if sum(line.endswith(ELLIPSES) for line in lines) / len(lines) > cfg.max_ellipsis_line_fraction:
        return "quality_ellipsis_lines"
    if len(_ALPHA_WORD.findall(text)) / len(words) < cfg.min_alpha_word_fraction:
        return "quality_alpha_words"
    return None

"""Language identification with py3langid on a bounded sample of the text.

Whole books are hundreds of kilobytes; a few evenly spaced windows identify the language as well
as the full text at a fraction of the cost, and the windows skip past a front matter (title page,
contents) that is short and often in another script or language.
"""

from __future__ import annotations

from functools import cache

from py3langid.langid import MODEL_FILE, LanguageIdentifier

WINDOWS = 5
WINDOW_CHARS = 1_000


@cache
def _identifier() -> LanguageIdentifier:
    """Loaded once per process (under a second); norm_probs gives a probability in [0, 1]."""
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def detect_language(text: str, windows: int = WINDOWS, window_chars: int = WINDOW_CHARS) -> tuple[str, float]:
    """ISO 639-1 code and its probability, judged on ``windows`` evenly spaced slices of the text."""
    lang, probability = _identifier().classify(sample_text(text, windows, window_chars))
    return str(lang), float(probability)


def sample_text(text: str, windows: int = WINDOWS, window_chars: int = WINDOW_CHARS) -> str:
    """Evenly spaced windows of ``text`` (all of it when short), each cut at word boundaries."""
    if len(text) <= windows * window_chars:
        return text
    step = (len(text) - window_chars) / (windows - 1) if windows > 1 else 0
    parts = []
    for i in range(windows):
        start = int(i * step)
        window = text[start : start + window_chars]
        if start > 0:  # drop the partial first word
            window = window.partition(" ")[2]
        if start + window_chars < len(text):  # and the partial last word
            window = window.rpartition(" ")[0] or window
        parts.append(window)
    return "\n".join(parts)

"""Confidence of a generated text from its token log-probabilities."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def sequence_confidence(token_logprobs: Iterable[float]) -> float | None:
    """Geometric-mean token probability of a sequence.

    ``confidence = exp(mean(logprob_i))`` over the sampled tokens, i.e. the
    inverse of the sequence perplexity (Jelinek et al., 1977; the same
    per-token normalisation used for sequence confidence in e.g. Malinin &
    Gales, "Uncertainty Estimation in Autoregressive Structured Prediction",
    ICLR 2021). The value lies in (0, 1]; 1.0 means every token was sampled
    with probability 1.

    Args:
        token_logprobs: natural-log probabilities, one per output token
            (each <= 0).

    Returns:
        The confidence in (0, 1], or ``None`` when there are no tokens.

    Raises:
        ValueError: a logprob is NaN or positive beyond rounding noise.
    """
    total = 0.0
    count = 0
    for logprob in token_logprobs:
        if math.isnan(logprob) or logprob > 1e-4:
            raise ValueError(f"not a log-probability: {logprob!r}")
        total += min(logprob, 0.0)
        count += 1
    if count == 0:
        return None
    # exp of a very negative mean underflows to 0.0; clamp into (0, 1].
    return max(math.exp(total / count), 5e-324)


#: Percentile of the content words' probabilities taken by
#: :func:`content_word_confidence` (10: about the least likely word of a
#: short sentence). Measured against the geometric mean in
#: docs/decisions/confidence-gate.md, where it did not rank failing
#: outputs better, so the product's gate keeps :func:`sequence_confidence`.
CONTENT_PERCENTILE = 10.0


def word_logprobs(deltas: Iterable[tuple[str, Sequence[float]]]) -> list[tuple[str, float]]:
    """Join streamed tokens into words with the log-probability of each word.

    A word's logprob is the sum of its tokens' logprobs (the probability of
    the whole word given what came before). A new word starts where a
    delta's text begins with whitespace or where letters/digits meet
    punctuation; a delta that carries several tokens (vLLM can stream
    more than one per step) is kept whole.

    Args:
        deltas: ``(text, token_logprobs)`` as streamed, in order.

    Returns:
        ``[(word, logprob)]`` with ``word`` stripped; punctuation-only
        pieces are returned as words of their own.
    """
    words: list[list] = []
    for text, logprobs in deltas:
        total = float(sum(logprobs))
        if not text.strip():
            if words and logprobs:
                words[-1][1] += total  # whitespace token: part of the previous word's cost
            continue
        stripped = text.strip()
        starts_new = (not words or text[:1].isspace() or _kind(stripped[0]) != _kind(words[-1][0][-1]))
        if starts_new:
            words.append([stripped, total])
        else:
            words[-1][0] += stripped
            words[-1][1] += total
    return [(word, logprob) for word, logprob in words]


def _kind(char: str) -> str:
    return "w" if char.isalnum() else "p"


def content_word_confidence(deltas: Iterable[tuple[str, Sequence[float]]], *,
                            percentile: float = CONTENT_PERCENTILE) -> float | None:
    """A low percentile of the content words' probabilities.

    The geometric mean (:func:`sequence_confidence`) is dominated by the
    many near-certain function words and punctuation, so a sentence with
    one invented fact still scores high. Here only content words count
    (letters or digits, not an English stop word of scikit-learn's
    ``ENGLISH_STOP_WORDS``), each with the probability of the whole word
    (:func:`word_logprobs`), and the ``percentile``-th of them is returned
    (linear interpolation, ``numpy.percentile``): the output is as
    confident as its least certain content words. The idea follows
    token-level uncertainty for hallucination detection (e.g. Manakul et
    al., "SelfCheckGPT", EMNLP 2023, max/avg of -log p; Varshney et al.
    2023, "A Stitch in Time Saves Nine", minimum token probability over
    key concepts).

    Args:
        deltas: ``(text, token_logprobs)`` as streamed.
        percentile: 0-100.

    Returns:
        A probability in (0, 1]; ``None`` when the output has no content word.
    """
    import numpy as np
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    content = [logprob for word, logprob in word_logprobs(deltas)
               if any(c.isalnum() for c in word) and word.lower() not in ENGLISH_STOP_WORDS]
    if not content:
        return None
    return max(math.exp(min(float(np.percentile(content, percentile)), 0.0)), 5e-324)

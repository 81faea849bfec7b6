"""Confidence of a generated text from its token log-probabilities."""

from __future__ import annotations

import math
from collections.abc import Iterable


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

import math

import pytest

from inference.confidence import sequence_confidence


def test_confidence_is_the_geometric_mean_token_probability():
    probs = [0.9, 0.5, 0.8]
    expected = (0.9 * 0.5 * 0.8) ** (1 / 3)
    assert sequence_confidence(math.log(p) for p in probs) == pytest.approx(expected)


def test_certain_tokens_give_confidence_one():
    assert sequence_confidence([0.0, 0.0]) == 1.0


def test_no_tokens_gives_no_confidence():
    assert sequence_confidence([]) is None


def test_very_unlikely_tokens_stay_above_zero():
    assert 0 < sequence_confidence([-1e6, -1e6]) < 1e-300


@pytest.mark.parametrize("bad", [float("nan"), 0.5])
def test_values_that_are_not_logprobs_are_rejected(bad):
    with pytest.raises(ValueError):
        sequence_confidence([-0.1, bad])

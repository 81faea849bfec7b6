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


def test_tokens_join_into_words_with_summed_logprobs():
    from inference.confidence import word_logprobs

    deltas = [("The", [-0.1]), (" hyp", [-1.0]), ("oten", [-0.5]), ("sion", [-0.25]), (".", [-0.05])]
    words = word_logprobs(deltas)
    assert [w for w, _ in words] == ["The", "hypotension", "."]
    assert words[1][1] == pytest.approx(-1.75)


def test_one_unlikely_content_word_lowers_content_confidence_but_not_the_mean():
    from inference.confidence import content_word_confidence

    # "Your blood pressure is 180": every token near-certain except the invented number.
    sure = [("Your", [-0.01]), (" blood", [-0.01]), (" pressure", [-0.01]), (" is", [-0.01]),
            (" normal", [-0.02]), (" today", [-0.01]), (".", [-0.01])]
    invented = sure[:4] + [(" 180", [-3.0])] + sure[5:]
    assert sequence_confidence([lp for _, lps in invented for lp in lps]) > 0.6
    assert content_word_confidence(invented, percentile=0) == pytest.approx(math.exp(-3.0))
    assert content_word_confidence(sure, percentile=0) > 0.97


def test_stop_words_and_punctuation_do_not_count():
    from inference.confidence import content_word_confidence

    deltas = [("It", [-5.0]), (" is", [-5.0]), (" swollen", [-0.1]), (".", [-9.0])]
    assert content_word_confidence(deltas, percentile=0) == pytest.approx(math.exp(-0.1))
    assert content_word_confidence([("It", [-1.0]), (" is", [-1.0])]) is None

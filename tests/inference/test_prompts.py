import pytest

from inference.prompts import EXAMPLE_ANSWERS, build_messages


def test_the_default_prompt_is_grade_6_english_with_the_diagnosis_last():
    messages = build_messages("  Left knee effusion.  ")
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert "the reading level of a 12-year-old" in messages[0]["content"]
    assert "Write your answer in" not in messages[0]["content"]
    assert messages[2]["content"] == EXAMPLE_ANSWERS["en"]
    assert messages[-1]["content"] == "Left knee effusion."


@pytest.mark.parametrize("grade, phrase", [(4, "US grade 4"), (8, "US grade 8")])
def test_the_reading_level_goes_into_the_prompt(grade, phrase):
    assert phrase in build_messages("x", reading_level=grade)[0]["content"]


def test_spanish_asks_for_spanish_and_shows_a_spanish_example():
    messages = build_messages("x", language="es")
    assert messages[0]["content"].endswith("Write your answer in Spanish.")
    assert messages[2]["content"] == EXAMPLE_ANSWERS["es"]


@pytest.mark.parametrize("options", [{"reading_level": 5}, {"language": "fr"}])
def test_unknown_options_raise(options):
    with pytest.raises(KeyError):
        build_messages("x", **options)

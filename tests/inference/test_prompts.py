import pytest

from inference.examples import Example
from inference.lay_terms import spanish_terms
from inference.prompts import (
    CLUSTER_PROMPT_VERSION,
    EXAMPLE_ANSWER_SPANISH_TERMS,
    EXAMPLE_ANSWERS,
    EXAMPLE_NOTE,
    EXAMPLE_SPANISH_TERMS,
    EXAMPLES_PROMPT_VERSION,
    HINTS_PROMPT_VERSION,
    PLACEMENTS,
    PROMPT_VERSION,
    SPANISH_TERMS_OPENING,
    ClusterPrompt,
    build_messages,
    hints_line,
    hints_strip,
    prompt_version,
    spanish_terms_line,
)


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


# --- retrieved examples (EXAMPLES_PROMPT_VERSION) ---------------------------

SHOWN = [Example("2", "There is 1+ pretibial edema .", "there is some swelling of your shins", 0.5),
         Example("9", "BACK : Atraumatic .", "your back has no injury", 0.2)]


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("options", [{}, {"reading_level": 4}, {"language": "es"}])
def test_with_examples_the_system_message_is_first_and_the_same_for_every_sentence(placement, options):
    one = build_messages("Left knee effusion.", examples=SHOWN, placement=placement, **options)
    other = build_messages("Mild cardiomegaly.", examples=SHOWN[1:], placement=placement, **options)
    assert one[0]["role"] == "system" and one[0] == other[0]
    assert all(m["role"] != "system" for m in one[1:])
    assert one[-1]["role"] == "user" and one[-1]["content"].endswith("Left knee effusion.")
    assert "replace only the medical words" in one[0]["content"]


def test_examples_as_turns_put_the_most_similar_next_to_the_sentence():
    messages = build_messages("  Left knee effusion. ", examples=SHOWN, placement="turns")
    assert [m["content"] for m in messages[1:]] == [
        "BACK : Atraumatic .", "your back has no injury",
        "There is 1+ pretibial edema .", "there is some swelling of your shins", "Left knee effusion."]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]


def test_examples_inline_are_listed_in_the_last_message():
    messages = build_messages("Left knee effusion.", examples=SHOWN, placement="inline")
    assert [m["role"] for m in messages] == ["system", "user"]
    text = messages[1]["content"]
    assert text.index("BACK") < text.index("pretibial") < text.index("Left knee effusion.")


def test_reading_level_and_language_reach_the_examples_prompt():
    assert "US grade 8" in build_messages("x", examples=SHOWN, reading_level=8)[0]["content"]
    assert build_messages("x", examples=SHOWN, language="es")[0]["content"].endswith("in Spanish.")
    with pytest.raises(KeyError):
        build_messages("x", examples=SHOWN, placement="nowhere")


def test_without_examples_the_old_prompt_and_version_stand():
    assert build_messages("x") == build_messages("x", examples=None)
    assert prompt_version() == PROMPT_VERSION == "2026-11-22.3"
    assert prompt_version(SHOWN) == prompt_version([]) == EXAMPLES_PROMPT_VERSION != PROMPT_VERSION


def test_cluster_examples_sit_after_the_system_message_and_before_the_retrieved_ones():
    fixed = [Example("5", "PREOPERATIVE DIAGNOSIS : Adenocarcinoma .", "diagnosis before surgery is cancer")]
    one = build_messages("Left knee effusion.", examples=SHOWN, placement="inline", prefix_examples=fixed)
    other = build_messages("Mild cardiomegaly.", examples=SHOWN[1:], placement="inline", prefix_examples=fixed)
    assert one[:3] == other[:3]  # system + the cluster's turns: one cacheable prefix per cluster
    assert [m["role"] for m in one] == ["system", "user", "assistant", "user"]
    assert "pretibial" in one[-1]["content"] and "pretibial" not in other[-1]["content"]


def test_a_cluster_prompt_is_stored_with_its_settings_and_read_back():
    prompt = ClusterPrompt(clusters=24, per_cluster=8, k=0)
    assert prompt.version == "2026-11-25.2+c24x8k0" and prompt.version.startswith(CLUSTER_PROMPT_VERSION)
    assert ClusterPrompt.parse(prompt.version) == prompt
    assert ClusterPrompt.parse(ClusterPrompt(175, 40, 12).version) == ClusterPrompt(175, 40, 12)
    assert len(ClusterPrompt(999, 999, 99).version) <= 32  # Translation.prompt_version's max_length
    for other in (PROMPT_VERSION, EXAMPLES_PROMPT_VERSION, CLUSTER_PROMPT_VERSION, "", "2026-11-25.2+c24x8"):
        assert ClusterPrompt.parse(other) is None


def test_a_hints_prompt_is_stored_with_its_flag_and_read_back():
    prompt = ClusterPrompt(24, 8, 0, hints=True)
    assert prompt.version == f"{HINTS_PROMPT_VERSION}+c24x8k0"
    assert ClusterPrompt.parse(prompt.version) == prompt
    assert ClusterPrompt.parse("2026-11-25.2+c24x8k0") == ClusterPrompt(24, 8, 0, hints=False)


def test_a_headings_prompt_is_stored_with_its_suffix_and_read_back():
    for prompt in (ClusterPrompt(24, 8, 0, headings=True), ClusterPrompt(24, 8, 2, hints=True, headings=True)):
        assert prompt.version.endswith(f"k{prompt.k}h") and ClusterPrompt.parse(prompt.version) == prompt
    assert ClusterPrompt.parse("2026-11-25.2+c24x8k0").headings is False
    assert ClusterPrompt.parse("2026-11-25.2+c24x8k0x") is None


def test_hints_follow_the_sentence_in_the_last_message_and_leave_the_prefix_alone():
    fixed = [Example("5", "PREOPERATIVE DIAGNOSIS : Adenocarcinoma .", "diagnosis before surgery is cancer")]
    hints = [("cholecystitis", "gallbladder inflammation"), ("hematuria", "blood in urine")]
    plain = build_messages("Acute cholecystitis and hematuria.", examples=[], placement="inline",
                           prefix_examples=fixed)
    hinted = build_messages("Acute cholecystitis and hematuria.", examples=[], placement="inline",
                            prefix_examples=fixed, hints=hints)
    assert hinted[:-1] == plain[:-1]  # the cluster's cached prefix is unchanged
    assert hinted[-1]["content"] == ("Acute cholecystitis and hematuria.\n\n(Plain words from a medical dictionary, "
                                     "use them if they fit: cholecystitis = gallbladder inflammation; "
                                     "hematuria = blood in urine)")
    assert build_messages("No acute distress.", examples=[], placement="inline", prefix_examples=fixed,
                          hints=[]) == build_messages("No acute distress.", examples=[], placement="inline",
                                                      prefix_examples=fixed)
    assert hints_line([]) == ""


def test_the_sentence_is_read_back_from_a_hinted_last_message():
    content = build_messages("Acute cholecystitis.", examples=[], placement="inline",
                             hints=[("cholecystitis", "gallbladder inflammation")])[-1]["content"]
    assert hints_strip(content) == "Acute cholecystitis."
    assert hints_strip("No acute distress.") == "No acute distress."


def test_spanish_terms_follow_the_diagnosis_in_spanish_only():
    terms = [("pleural effusion", "Derrame pleural"), ("CSF leak", "CSF leak")]
    spanish = build_messages("Small pleural effusion.", language="es", spanish_terms=terms)
    assert spanish[-1]["content"] == ("Small pleural effusion.\n\n(The Spanish medical terms for these words, from a "
                                      "medical dictionary: use them, and explain each in plain words: pleural effusion"
                                      " = derrame pleural; CSF leak = CSF leak)")
    plain = build_messages("Small pleural effusion.", language="es")
    assert spanish[0] == plain[0]
    # the worked example shows the list used in the answer, not copied into it
    assert spanish[1]["content"] == EXAMPLE_NOTE + "\n\n" + spanish_terms_line(EXAMPLE_SPANISH_TERMS)
    assert spanish[2]["content"] == EXAMPLE_ANSWER_SPANISH_TERMS
    assert SPANISH_TERMS_OPENING not in EXAMPLE_ANSWER_SPANISH_TERMS
    assert build_messages("Small pleural effusion.", spanish_terms=terms)[-1]["content"] == "Small pleural effusion."
    assert spanish_terms_line([]) == ""


def test_the_worked_examples_spanish_terms_are_the_vocabularys():
    assert tuple(spanish_terms(EXAMPLE_NOTE)) == EXAMPLE_SPANISH_TERMS

"""The prompt that asks for a faithful plain-language explanation.

``PROMPT_VERSION`` is stored with every translation: change it whenever the
wording of :data:`SYSTEM_PROMPT`, the worked example or the message layout
changes.

Version history (measured on the first 10 clinician-changed laymaker-dev
sentences with the default 1.5B model, docs/quality/):

* ``2026-11-22.1``: instructions only, "grade 6 reading level". The model
  read it as "a 6-year-old", wrote stories and analogies ("too many cookies
  in your jar") and invented facts in 6 of 10 outputs.
* ``2026-11-22.2``: explicit rules (keep numbers, doses, drugs, laterality,
  negations; add nothing; no stories) plus one worked example written for
  this project (not from the evaluation data). Outputs are shorter and stay
  closer to the note; errors remain (see the README).
"""

from __future__ import annotations

PROMPT_VERSION = "2026-11-22.2"

SYSTEM_PROMPT = """You rewrite a clinician's note so that the patient can understand it.
Rules:
- Use plain, everyday words and short sentences (the reading level of a 12-year-old).
- Briefly explain each medical term in plain words.
- Keep every fact exactly: numbers, units, doses, drug names, left and right, and every negation (no, not, without, denies).
- Add nothing: no new facts, no advice, no comparisons or stories, no greeting.
- Speak to the patient as "you".
Answer with the rewritten text only."""

# One worked example, shown to the model as an earlier turn of the chat.
EXAMPLE_NOTE = "Mild left ventricular hypertrophy. No pericardial effusion."
EXAMPLE_ANSWER = (
    "The walls of the main pumping chamber on the left side of your heart are a "
    "little thicker than normal. There is no extra fluid around your heart."
)


def build_messages(diagnosis_text: str) -> list[dict[str, str]]:
    """Chat messages for one translation.

    Args:
        diagnosis_text: the clinician's text, already validated (non-empty).

    Returns:
        ``[system, example user, example assistant, user]`` messages as
        ``{"role", "content"}`` dicts. Everything before the last message is
        identical for every request, so engines with prefix caching reuse its
        KV cache and only the diagnosis itself is prefilled.
    """
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": EXAMPLE_NOTE},
        {"role": "assistant", "content": EXAMPLE_ANSWER},
        {"role": "user", "content": diagnosis_text.strip()},
    ]

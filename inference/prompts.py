"""The system prompt that asks for a faithful plain-language explanation.

``PROMPT_VERSION`` is stored with every translation: change it whenever the
wording of :data:`SYSTEM_PROMPT` or the message layout changes.
"""

from __future__ import annotations

PROMPT_VERSION = "2026-11-22.1"

SYSTEM_PROMPT = (
    "You explain medical text to patients. Rewrite the clinician's note in "
    "plain, everyday English that a patient with a grade 6 reading level can "
    "understand. Use short sentences. Explain medical words in simple terms.\n"
    "Stay faithful to the note:\n"
    "- keep every number, unit and dose exactly as written;\n"
    "- keep every drug name;\n"
    "- keep left and right exactly as written;\n"
    "- keep every negation (no, not, without, denies) so the meaning does not "
    "flip;\n"
    "- do not add facts, advice or a diagnosis that the note does not state.\n"
    "Answer with the explanation only, speaking to the patient as \"you\"."
)


def build_messages(diagnosis_text: str) -> list[dict[str, str]]:
    """Chat messages for one translation.

    Args:
        diagnosis_text: the clinician's text, already validated (non-empty).

    Returns:
        ``[{"role": "system", ...}, {"role": "user", ...}]``; the system
        message is identical for every request, so engines with prefix
        caching reuse its KV cache.
    """
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": diagnosis_text.strip()},
    ]

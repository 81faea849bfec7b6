"""Over the stored texts (the committed outputs on laymaker-dev and the
unseen Cochrane samples, as the product delivered them): every
faithfulness flag, every missing item of the safety check and every
doubted sentence is located where it stands, in the sentence it belongs to
(clinical/translation/alignment.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.quality import CROSSFIT_CLUSTER_VERSION, laymaker_outputs, laymaker_rows
from clinical.models import Translation
from clinical.quality import measure
from clinical.translation.alignment import DOUBTED, translation_sentences
from inference.prompts import PROMPT_VERSION

pytestmark = pytest.mark.django_db

QUALITY = Path(__file__).resolve().parents[2] / "docs" / "quality"
#: A threshold of the gate's calibrated range, so that some stored texts are doubted.
THRESHOLD = 0.6


def stored_pairs() -> list[tuple[str, str, float | None]]:
    """``(input, delivered text, P(yes) or None)``: the cross-fitted fast
    texts of laymaker-dev and the delivered texts of the unseen samples."""
    rows, _ = laymaker_rows()
    ours = laymaker_outputs(QUALITY / "quality-report-examples-outputs.jsonl", CROSSFIT_CLUSTER_VERSION)
    pairs = [(row["ORIGINAL"], ours[row["ID"]], None) for row in rows if row["ID"] in ours]
    for name in ("unseen-cochrane-sample", "unseen-cochrane-sample-2", "unseen-cochrane-sample-3"):
        for line in (QUALITY / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            check = record.get("self_check") or {}
            pairs.append((record["input"], record["delivered"], check.get("p_yes")))
    return pairs


def test_every_flag_lost_item_and_doubted_sentence_of_the_stored_texts_is_located(clinician):
    pairs = stored_pairs()
    assert len(pairs) == 370
    flags = missing = doubted = 0
    for text, delivered, p_yes in pairs:
        quality = measure.output_quality(input_text=text, output_text=delivered, language="en")
        row = Translation.objects.create(
            user=clinician, input_text=text, output_text=delivered, status=Translation.Status.COMPLETED,
            prompt_version=PROMPT_VERSION, self_check=p_yes, self_check_threshold=THRESHOLD,
            faithfulness_flags=quality.faithfulness.flag_dicts(), safety_missing=quality.safety.missing_dicts())
        sentences = translation_sentences(row)
        placed_flags = [f for s in sentences for f in s["flags"]]
        placed_missing = [m for s in sentences for m in s["missing"]]
        assert len(placed_flags) == len(quality.faithfulness.flags)
        assert len(placed_missing) == len(quality.safety.missing)
        for sentence in sentences:
            for flag in sentence["flags"]:
                assert delivered[flag["start"]:flag["end"]] == flag["text"]
                assert sentence["plain"]["start"] <= flag["start"] < sentence["plain"]["end"]
            for item in sentence["missing"]:
                assert item["start"] is not None, (item, text)
                assert text[item["start"]:item["end"]].lower() == " ".join(item["text"].split()).lower() or \
                    text[item["start"]:item["end"]].split() == item["text"].split()
            if sentence["status"] == DOUBTED:
                doubted += 1
                assert sentence["plain"] is not None
        flags += len(placed_flags)
        missing += len(placed_missing)
    # The stored texts hold findings of each kind, so the test checks something.
    assert flags >= 10 and missing >= 10 and doubted >= 1

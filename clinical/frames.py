"""The WebSocket protocol's frames, built here and nowhere else.

Client → server frames (JSON text):
    ``{"type": "translate", "text": "<diagnosis>", "reading_level"?: 4|6|8,
    "language"?: "en"|"es"}``
    ``{"type": "cancel"}``
    ``{"type": "watch", "id": "<request id>"}``: follow the verification of
    one of the user's own earlier translations.
Server → client frames:
    ``{"type": "started", "id", "engine", "model", "precision",
    "reading_level", "language"}`` (:func:`started_frame`)
    ``{"type": "token", "text"}`` (one per decoded piece)
    ``{"type": "checking", "id", "sentences"}`` (:func:`checking_frame`):
    the text is whole and the model's own check of it has started
    (``sentences``: how many sentences it checks one by one, 1 for a
    single sentence); not sent where no check runs
    ``{"type": "done", "id", "status": "completed", "ttft_ms", "total_ms",
    "queue_wait_ms", "tokens_in", "tokens_out", "tokens_per_s",
    "confidence", "finish_reason", "verification", "readability",
    "safety", "rerun_reason", "glossary"}`` (:func:`done_frame`; see
    :func:`clinical.quality.measure.translation_quality_payload`)
    then, below the confidence threshold or when the safety check failed,
    ``verifying`` and later ``verified`` or ``verification_failed``
    (:func:`verification_frame`; the re-run worker sends them through the
    channel layer),
    then ``{"type": "glossary", "id", "terms": [{"term", "definition",
    "source"}]}`` once the engine has written plain definitions of the
    input's medical terms (``source`` ``engine``; terms it did not define
    keep their vocabulary definition: ``hpo_layperson``, ``hpo``, ``drug``).
    ``{"type": "cancelled", "id"}``
    ``{"type": "error", "code", "message", "retry_after_s"?}``
    (:func:`error_frame`) with ``code`` one of ``bad_frame``, ``empty``,
    ``too_long``, ``invalid``, ``invalid_option``, ``in_progress``,
    ``engine_error``, ``engine_restarting`` (the engine died while this
    translation was being written, or had died before it was admitted,
    and is being rebuilt: :func:`translation_failed_frame`,
    :func:`clinical.translation.services.translation_accept`), ``not_found``, ``frame_too_large``, ``busy`` (the
    engine's queue is full), ``rate_limited`` (``TRANSLATE_RATE_PER_USER`` or
    ``SOCKET_FRAME_RATE`` exceeded), ``too_many_translations`` (the user
    already runs ``USER_MAX_CONCURRENT_TRANSLATIONS``), ``too_many_sockets``
    (sent before the close code 4429: ``USER_MAX_SOCKETS`` are open),
    ``forbidden`` (sent before the close code 4403: not in the Clinician
    group), ``unavailable`` (database or Redis
    unreachable; nothing was stored), ``draining`` and ``server_restart``
    (this replica is shutting down); ``busy``, ``rate_limited``,
    ``too_many_translations``, ``unavailable``, ``draining``,
    ``server_restart``, ``engine_error`` and ``engine_restarting`` carry
    ``retry_after_s`` when a retry can help.

The server-sent events of the REST API (:mod:`clinical.api.streaming`)
carry the same payloads without their ``type``.
"""

from __future__ import annotations

from dataclasses import dataclass

from clinical.models import (
    RERUN_AS_WRITTEN,
    RERUN_KEPT_FAST_TEXT,
    RERUN_PRECISION,
    RERUN_SENTENCES,
    Rerun,
    Translation,
)
from clinical.quality import measure as quality
from clinical.quality.display import sentences_named
from inference.examples import normalise


def started_frame(translation: Translation, engine_info) -> dict:
    """``started``: the request was admitted (``engine_info``: the engine's
    :class:`inference.base.EngineInfo`)."""
    return {"type": "started", "id": str(translation.request_id), "engine": engine_info.engine,
            "model": engine_info.model, "precision": engine_info.precision,
            "reading_level": translation.reading_level, "language": translation.language}


def token_frame(text: str) -> dict:
    """``token``: one decoded piece of text."""
    return {"type": "token", "text": text}


def checking_frame(translation: Translation, sentences: int) -> dict:
    """``checking``: the text is whole; the model checks its ``sentences``
    sentences (:mod:`clinical.translation.self_check`, about 0.8 s each on
    two CPU cores) before ``done``."""
    return {"type": "checking", "id": str(translation.request_id), "sentences": sentences}


def done_frame(translation: Translation) -> dict:
    """``done``: a completed translation with its figures (ms, tokens) and
    quality payloads."""
    return {
        "type": "done",
        "id": str(translation.request_id),
        "status": translation.status,
        "ttft_ms": translation.ttft_ms,
        "total_ms": translation.total_ms,
        "queue_wait_ms": translation.queue_wait_ms,
        "tokens_in": translation.tokens_in,
        "tokens_out": translation.tokens_out,
        "tokens_per_s": translation.tokens_per_s,
        "confidence": translation.confidence,
        "finish_reason": translation.finish_reason,
        "verification": translation.verification,
        # readability, safety, rerun_reason, glossary (clinical.quality.measure)
        **quality.translation_quality_payload(translation),
    }


def cancelled_frame(translation: Translation) -> dict:
    """``cancelled``: the clinician stopped it; the row says ``cancelled``."""
    return {"type": "cancelled", "id": str(translation.request_id)}


def error_frame(code: str, message: str, *, retry_after_s: float | None = None) -> dict:
    """``error`` with a code from the module docstring and a message for the
    clinician; ``retry_after_s`` (seconds) when a retry can help."""
    frame = {"type": "error", "code": code, "message": message}
    if retry_after_s is not None:
        frame["retry_after_s"] = retry_after_s
    return frame


#: ``error_class`` recorded on a translation that the engine's death ended.
ENGINE_DEAD_CLASS = "EngineDead"
#: Seconds a client is asked to wait after the engine died (one rebuild of
#: the default model on a CPU; a 7B model on a GPU takes longer).
ENGINE_RESTART_RETRY_AFTER_S = 30


@dataclass(frozen=True)
class TranslationFailure:
    """Why a translation's row ended ``error``, in the words every transport
    uses (the socket's ``error`` frame, the REST API, its server-sent
    events and FHIR, :mod:`clinical.api.errors`).

    Attributes:
        code: ``engine_restarting`` (the engine died under it and the
            replica rebuilds it) or ``engine_error`` (any other failure).
        message: for the clinician or the calling system; no patient text.
        retry_after_s: seconds to wait before retrying (``None``: no advice).
    """

    code: str
    message: str
    retry_after_s: int | None = None


def translation_failure(translation: Translation) -> TranslationFailure:
    """The :class:`TranslationFailure` of a translation whose row ended
    ``error``: ``engine_restarting`` with ``ENGINE_RESTART_RETRY_AFTER_S``
    when its ``error_class`` is ``EngineDead``, else ``engine_error``."""
    if translation.error_class == ENGINE_DEAD_CLASS:
        return TranslationFailure(
            "engine_restarting", "The translation engine stopped while writing this explanation and is "
            "restarting. The partial text was recorded as failed; please do not use it. Try again "
            "shortly.", retry_after_s=ENGINE_RESTART_RETRY_AFTER_S)
    return TranslationFailure("engine_error", "The translation failed and was recorded. Please try again.")


def translation_failed_frame(translation: Translation) -> dict:
    """``error`` for a translation whose row ended ``error``: code
    ``engine_restarting`` with ``retry_after_s`` when the engine died under
    it (``error_class`` ``EngineDead``; the replica rebuilds it), else
    ``engine_error`` (:func:`translation_failure`). Either way the row and
    its audit record exist."""
    failure = translation_failure(translation)
    return error_frame(failure.code, failure.message, retry_after_s=failure.retry_after_s)


def glossary_frame(translation: Translation) -> dict:
    """``glossary``: ``{"type": "glossary", "id", "terms": [{"term",
    "definition", "source"}]}``."""
    return {"type": "glossary", "id": str(translation.request_id), "terms": list(translation.glossary or [])}


REASON_MESSAGES = {
    quality.LOW_CONFIDENCE: "Low confidence",
    quality.LOW_SELF_CHECK: "The model's own check doubts it",
    quality.SAFETY_FAILED: "Safety check: facts missing",
    quality.FAITHFULNESS_FAILED: "Faithfulness check: statements the note does not make",
}

#: What each re-run candidate (clinical.rerun.candidates) did, for the
#: clinician: the start of ``Rerun.change_note``.
CANDIDATE_MESSAGES = {
    "full_precision": "Written again from the same instructions in full precision",
    "retrieved_examples": "Rewritten with worked examples of similar sentences",
    "span_replacement": "Rewritten from the original sentence with plain words for the hard terms",
    "sampled": "Written again from the same instructions with other wording",
}
#: The note when the re-run kept the fast text (``Rerun.candidate``
#: :data:`clinical.models.RERUN_KEPT_FAST_TEXT`).
KEPT_FAST_MESSAGE = "The first text stands: it passed both checks and no re-written text was clearly better"
UNCHANGED_MESSAGE = "The diagnosis text as written: no plain-words version passed the checks"
#: The note when plain-words versions passed the checks but the model's own
#: check doubted each one, and the diagnosis as written was kept
#: (clinical.rerun.candidates.candidate_select's self-check fallback).
UNCHANGED_DOUBTED_MESSAGE = ("The diagnosis text as written: the model's own check doubted every plain-words "
                             "version; explain it to the patient yourself")
#: The note when the model's own check still doubted the text the re-run
#: would have delivered, and the diagnosis as written was kept instead
#: (clinical.rerun.candidates.candidate_as_written); the page keeps that
#: text as the fast draft.
AS_WRITTEN_MESSAGE = ("The diagnosis text as written: the model's own check doubted the plain-words version; "
                      "explain it to the patient yourself")


def sentences_as_written(rerun: Rerun) -> list[int]:
    """The sentences (from 1) of a note re-run sentence by sentence
    (``Rerun.candidate`` :data:`clinical.models.RERUN_SENTENCES`) that are
    given as written; empty for any other re-run."""
    if rerun.candidate != RERUN_SENTENCES:
        return []
    return [r["sentence"] for r in rerun.candidates or [] if r.get("kept") == RERUN_AS_WRITTEN]


def _sentences_change_note(translation: Translation, rerun: Rerun) -> str:
    """:func:`rerun_change_note` for a note re-run sentence by sentence, e.g.
    "Sentences 2 and 4 of 5 were re-run (the model's own check doubted
    sentence 2; a safety or faithfulness check failed on sentence 4):
    sentence 2 was rewritten (Written again ...); sentence 4 is given as
    written, explain it to the patient yourself. The other sentences are as
    first written."."""
    kept = [r for r in rerun.candidates or [] if "kept" in r]
    total = len(translation.sentence_checks or [])
    numbers = [r["sentence"] for r in kept]
    reasons = {r["sentence"]: set((r.get("reason") or "").split(",")) for r in kept}
    doubted = [n for n in numbers if quality.LOW_SELF_CHECK in reasons[n]]
    failed = [n for n in numbers if {quality.SAFETY_FAILED, quality.FAITHFULNESS_FAILED} & reasons[n]]
    why = ([f"the model's own check doubted {sentences_named(doubted)}"] if doubted else []) + \
          ([f"a safety or faithfulness check failed on {sentences_named(failed)}"] if failed else [])
    what = []
    for name, group in _by_kept(kept).items():
        if name == RERUN_AS_WRITTEN:
            what.append(f"{sentences_named(group)} {'is' if len(group) == 1 else 'are'} given as written, explain "
                        f"{'it' if len(group) == 1 else 'them'} to the patient yourself")
        elif name == RERUN_KEPT_FAST_TEXT:
            what.append(f"{sentences_named(group)} stayed as first written: no re-written text was clearly better")
        else:
            what.append(f"{sentences_named(group)} {'was' if len(group) == 1 else 'were'} rewritten "
                        f"({CANDIDATE_MESSAGES.get(name, name)})")
    opening = sentences_named(numbers)
    opening = opening[0].upper() + opening[1:] + f" of {total} {'was' if len(numbers) == 1 else 'were'} re-run"
    others = "" if len(numbers) == total else " The other sentences are as first written."
    return opening + (f" ({'; '.join(why)})" if why else "") + ": " + "; ".join(what) + "." + others


def _by_kept(kept: list[dict]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for record in kept:
        grouped.setdefault(record["kept"], []).append(record["sentence"])
    return grouped


def _quoted(items: list[str], limit: int = 3) -> str:
    shown = [f"'{item}'" for item in dict.fromkeys(items)][:limit]
    more = len(dict.fromkeys(items)) - len(shown)
    words = ", ".join(shown[:-1]) + (" and " if len(shown) > 1 else "") + shown[-1]
    return words + (f" and {more} more" if more > 0 else "")


def rerun_change_note(*, translation: Translation, rerun: Rerun) -> str:
    """Why the verified text replaced the fast one, in plain words for the
    clinician: which candidate it is and what was wrong with the first
    text, e.g. "Rewritten from the original sentence with plain words for
    the hard terms: the first text left out 'left'." Stored on
    ``Rerun.change_note`` when the re-run completes (so the page, the
    handout and the frames say the same); empty for a re-run without a
    candidate (recorded before candidates existed)."""
    if not rerun.candidate:
        return ""
    if rerun.candidate == RERUN_SENTENCES:
        return _sentences_change_note(translation, rerun)
    if rerun.candidate == RERUN_KEPT_FAST_TEXT:
        if translation.self_check is not None:
            shown = f" (the model's own check gave it {translation.self_check:.2f})"
        elif translation.confidence:
            shown = f" (it was written with confidence {translation.confidence:.2f})"
        else:
            shown = ""
        return KEPT_FAST_MESSAGE + shown + "."
    label = CANDIDATE_MESSAGES.get(rerun.candidate, rerun.candidate)
    if rerun.candidate == RERUN_AS_WRITTEN:
        label = AS_WRITTEN_MESSAGE
    elif normalise(rerun.output_text) == normalise(translation.input_text):
        # A rewrite (the fast text or another candidate) passed both checks, yet the input was
        # kept: only the self-check fallback does that (the tiers rank any passing rewrite above it).
        rewrite_passed = (translation.safety_passed and translation.faithfulness_passed) or any(
            r.get("safety_passed") and r.get("faithfulness_passed") and r.get("name") != rerun.candidate
            for r in rerun.candidates or [])
        label = UNCHANGED_DOUBTED_MESSAGE if rewrite_passed else UNCHANGED_MESSAGE
    why = []
    missing = [item.get("text", "") for item in translation.safety_missing or [] if item.get("text")]
    if missing:
        why.append(f"left out {_quoted(missing)}")
    added = [flag.get("text", "") for flag in translation.faithfulness_flags or [] if flag.get("text")]
    if added:
        why.append(f"added {_quoted(added)}")
    reasons = (translation.rerun_reason or "").split(",")
    if quality.LOW_CONFIDENCE in reasons and translation.confidence is not None:
        why.append(f"was written with low confidence ({translation.confidence:.2f})")
    if quality.LOW_SELF_CHECK in reasons and translation.self_check is not None:
        why.append(f"was doubted by the model's own check ({translation.self_check:.2f} that it says the same)")
    note = label + (": the first text " + " and ".join(why) if why else "") + "."
    if rerun.output_text.strip() == translation.output_text.strip():
        note += " It is the same text as the first one."
    if rerun.safety_passed is False or rerun.faithfulness_passed is False:
        note += " No candidate passed both checks; this one has the fewest problems."
    return note


def _still_doubted(translation: Translation, rerun: Rerun) -> str:
    """The verified message's warning when the model's own check doubts the
    kept text too (P(yes) under the threshold the fast text was gated by,
    :attr:`clinical.models.Translation.self_check_threshold`), else ""."""
    threshold = translation.self_check_threshold
    if not quality.self_check_doubted(rerun.self_check, threshold):
        return ""
    return (f" The model's own check still doubts this text ({rerun.self_check:.2f}, under {threshold:.2f}); "
            "read it against the diagnosis before giving it to the patient.")


VERIFICATION_MESSAGES = {
    Translation.Verification.PENDING: "Low confidence: queued for verification in full precision…",
    Translation.Verification.RUNNING: "Verifying in full precision…",
    Translation.Verification.FAILED: "Full-precision verification failed; the fast text is unverified.",
}


def verification_frame(translation: Translation) -> dict | None:
    """The socket frame describing a translation's verification state, or
    ``None`` when no verification was needed. Every frame carries a
    ``message`` for the clinician.

    Frames: ``{"type": "verifying", "id", "state": "queued"|"running",
    "reason"?}`` (``reason``, on ``queued``: the translation's
    ``rerun_reason``), ``{"type": "verified", "id", "text", "confidence",
    "precision", "engine_precision", "engine", "model", "queue_wait_ms",
    "rerun_ms", "tokens_out", "reason", "candidate", "candidates", "change",
    "readability", "safety", "faithfulness"}`` (``precision``: the re-run's
    kind, always ``"fp32"`` (:data:`clinical.models.RERUN_PRECISION`), kept
    for older clients; ``engine_precision``: the precision the re-run
    engine reported after load, e.g. ``"fp32"``, ``"bf16"`` or
    ``"fp8 (compressed-tensors)"``, which the ``message`` names too
    (:attr:`clinical.models.Rerun.precision_label`: ``precision`` for a
    re-run recorded before engines reported one); the re-run output's own
    readability and checks, see
    :func:`clinical.quality.measure.rerun_quality_payload`; ``candidate``:
    which of the re-run's candidates replaced the text, ``candidates``: each
    one tried, checks and figures without text (``Rerun.candidates``),
    ``change``: why the text changed, :func:`rerun_change_note`) and
    ``{"type": "verification_failed", "id"}``.
    """
    request_id = str(translation.request_id)
    state = translation.verification
    message = VERIFICATION_MESSAGES.get(state, "")
    reasons = [r for r in (translation.rerun_reason or "").split(",") if r]
    if state == Translation.Verification.PENDING:
        if reasons:
            message = " and ".join(REASON_MESSAGES.get(r, r) for r in reasons) + \
                ": queued for verification in full precision…"
        return {"type": "verifying", "id": request_id, "state": "queued", "message": message,
                "reason": translation.rerun_reason}
    if state == Translation.Verification.RUNNING:
        return {"type": "verifying", "id": request_id, "state": "running", "message": message}
    if state == Translation.Verification.FAILED:
        return {"type": "verification_failed", "id": request_id, "message": message}
    if state == Translation.Verification.VERIFIED:
        rerun = Rerun.objects.get(translation=translation, precision=RERUN_PRECISION)
        confidence = "not measured" if rerun.confidence is None else f"{rerun.confidence:.2f}"
        still_doubted = _still_doubted(translation, rerun)
        as_written = sentences_as_written(rerun)
        unchecked_or_doubted = still_doubted or rerun.candidate == RERUN_AS_WRITTEN or as_written
        return {"type": "verified", "id": request_id, "text": rerun.output_text,
                "confidence": rerun.confidence, "precision": rerun.precision,
                "engine_precision": rerun.precision_label,
                "engine": rerun.engine, "model": rerun.model_name,
                "queue_wait_ms": rerun.queue_wait_ms, "rerun_ms": rerun.duration_ms,
                "tokens_out": rerun.tokens_out, "reason": translation.rerun_reason,
                "candidate": rerun.candidate, "candidates": list(rerun.candidates or []),
                "sentences_as_written": as_written,
                "change": rerun.change_note,
                **quality.rerun_quality_payload(rerun),
                # "Verified" only where the model's own check does not still doubt the text, and not
                # for the diagnosis as written, which no model wrote or checked.
                "message": f"{'Re-run' if unchecked_or_doubted else 'Verified'}"
                           " in full precision "
                           f"({rerun.precision_label}), confidence "
                           f"{confidence}"
                           + ("" if rerun.self_check is None else f", model's own check {rerun.self_check:.2f}")
                           + f", re-run {rerun.duration_ms or 0:,.0f} ms."
                           + (f" {rerun.change_note}" if rerun.change_note else "")
                           + ("" if rerun.safety_passed is not False else
                              " The safety check still finds facts missing; check the text.")
                           + ("" if rerun.faithfulness_passed is not False else
                              " The faithfulness check still flags statements the note does not make; "
                              "check the text.")
                           + still_doubted}
    return None

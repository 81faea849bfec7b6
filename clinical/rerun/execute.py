"""The confidence gate in the worker: run a requested re-run on the
worker's full-precision engine and record its output, exactly once.

A re-run tries candidates (:mod:`clinical.rerun.candidates`: the same
messages greedy, retrieved examples, span replacement on the copied input,
sampling; ``RERUN_CANDIDATES``) one after another on the worker's engine,
measures each with the product's checks, stops early at the first that
passes both checks with the gate's confidence, and keeps the best
(:func:`clinical.rerun.candidates.candidate_select`).

Called by :func:`clinical.rerun.tasks.translation_verify`; the dispatch side
is :mod:`clinical.rerun.dispatch`.
"""

from __future__ import annotations

import asyncio
import logging
import time

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from clinical.audit import audit_verification
from clinical.models import RERUN_PRECISION, RERUN_SENTENCES, Rerun, Translation
from clinical.quality import gate
from clinical.quality import measure as quality
from clinical.rerun import candidates as rerun_candidates
from clinical.rerun import sentences as rerun_sentences
from clinical.rerun.change_note import rerun_change_note
from clinical.rerun.notify import rerun_notify
from clinical.rerun.worker_engine import rerun_engine_get, run_in_engine_loop
from clinical.runtime.log import request_id_var
from inference.base import EngineError, Generated, GenerationParams, generate_full
from inference.confidence import sequence_confidence
from inference.parts import TranslationPart, line_start_capitalized, translation_parts_join
from inference.self_check import self_check_run

logger = logging.getLogger(__name__)


@transaction.atomic
def rerun_start(*, translation_id: int) -> Rerun | None:
    """Mark the re-run as running and count the attempt.

    Returns:
        The re-run, or ``None`` when there is nothing to do (already
        completed or failed, or no re-run was requested): a redelivered task
        then ends without working.
    """
    rerun = (Rerun.objects.select_for_update().select_related("translation")
             .filter(translation_id=translation_id, precision=RERUN_PRECISION).first())
    if rerun is None or rerun.status in (Rerun.Status.COMPLETED, Rerun.Status.FAILED):
        return None
    now = timezone.now()
    if rerun.started_at is None:
        rerun.queue_wait_ms = round((now - rerun.enqueued_at).total_seconds() * 1000, 1)
    rerun.started_at = now
    rerun.status = Rerun.Status.RUNNING
    rerun.attempts += 1
    rerun.save()
    rerun.translation.verification = Translation.Verification.RUNNING
    rerun.translation.save(update_fields=["verification"])
    return rerun


@transaction.atomic
def rerun_complete(*, rerun_id: int, output_text: str, token_logprobs: list[float],
                   duration_ms: float, engine: str, model_name: str,
                   candidate: str = rerun_candidates.FULL_PRECISION, candidates: list[dict] | None = None,
                   engine_precision: str = "", confidence: float | None = None,
                   self_check: float | None = None) -> Rerun:
    """Store the verified output exactly once and mark the translation
    verified; the first completion wins, later ones change nothing.

    Args:
        rerun_id: the running re-run.
        output_text: the text kept (the chosen candidate's).
        token_logprobs: its tokens' natural-log probabilities (its
            confidence; empty: no confidence).
        duration_ms: the whole re-run's generation time, every candidate
            tried (ms).
        engine, model_name: the worker engine's backend and model.
        candidate: the name of the candidate kept
            (:data:`clinical.rerun.candidates.CANDIDATE_NAMES`).
        candidates: every candidate's record, without text
            (:meth:`clinical.rerun.candidates.Candidate.record`).
        engine_precision: the engine's own precision label.
        confidence: the kept text's confidence when ``token_logprobs`` is
            empty (the fast text kept: its own confidence).
        self_check: the model's own check of the kept text (P(yes)), if run.

    The output is checked again here (readability, safety, faithfulness)
    and the clinician's note on why the text changed is written
    (:func:`clinical.rerun.change_note.rerun_change_note`). A kept text that still
    fails a check is stored as verified with its failed checks, which the
    page, the handout and the frame show as needing review.
    """
    rerun = Rerun.objects.select_for_update().select_related("translation").get(pk=rerun_id)
    if rerun.status == Rerun.Status.COMPLETED:
        return rerun
    rerun.status = Rerun.Status.COMPLETED
    rerun.output_text = output_text
    rerun.confidence = sequence_confidence(token_logprobs) if token_logprobs else confidence
    rerun.self_check = self_check
    rerun.tokens_out = len(token_logprobs)
    rerun.duration_ms = round(duration_ms, 1)
    rerun.engine, rerun.model_name = engine, model_name
    rerun.engine_precision = engine_precision
    rerun.candidate = candidate
    rerun.candidates = list(candidates or [])
    rerun.finished_at = timezone.now()
    rerun.error_class = ""
    translation = rerun.translation
    measured = quality.output_quality(input_text=translation.input_text, output_text=output_text,
                                      language=translation.language)
    rerun.output_fkgl = measured.readability.output_fkgl
    rerun.output_readability = measured.readability.output_score
    rerun.safety_passed = measured.safety.passed
    rerun.safety_missing = measured.safety.missing_dicts()
    rerun.faithfulness_passed = measured.faithfulness.passed
    rerun.faithfulness_flags = measured.faithfulness.flag_dicts()
    rerun.change_note = rerun_change_note(translation=translation, rerun=rerun)
    rerun.save()
    _verification_conclude(rerun=rerun, state=Translation.Verification.VERIFIED)
    return rerun


@transaction.atomic
def rerun_fail(*, translation_id: int, error_class: str) -> None:
    """Record that the re-run gave up (retries exhausted or time limit);
    the fast text stays what the clinician sees, marked unverified."""
    rerun = Rerun.objects.select_for_update().filter(
        translation_id=translation_id, precision=RERUN_PRECISION).first()
    if rerun is None or rerun.status == Rerun.Status.COMPLETED:
        return
    rerun.status = Rerun.Status.FAILED
    rerun.error_class = error_class[:120]
    rerun.finished_at = timezone.now()
    rerun.save()
    _verification_conclude(rerun=rerun, state=Translation.Verification.FAILED)


def _verification_conclude(*, rerun: Rerun, state: str) -> None:
    """Set the translation's final verification state, audit it, and tell
    its sockets once the transaction commits."""
    translation = rerun.translation
    translation.verification = state
    translation.save(update_fields=["verification"])
    audit_verification(rerun=rerun)
    transaction.on_commit(lambda: rerun_notify(translation=translation))


async def _generate_bounded(engine, request_id: str, messages, params: GenerationParams | None = None,
                            timeout_s: float | None = None) -> Generated:
    """One generation of the re-run, stopped after ``timeout_s`` seconds
    (default ``RERUN_SOFT_TIME_LIMIT_S``): Celery's solo pool (the worker's,
    for vLLM) enforces no time limit, so a hung engine would otherwise hold
    the lane for ever.

    Raises:
        TimeoutError: the limit passed; the engine request is aborted.
    """
    params = params or GenerationParams(max_tokens=settings.MAX_OUTPUT_TOKENS)
    timeout_s = settings.RERUN_SOFT_TIME_LIMIT_S if timeout_s is None else timeout_s
    try:
        return await asyncio.wait_for(generate_full(engine, request_id, messages, params), timeout=max(timeout_s, 0.001))
    except TimeoutError:
        await engine.abort(request_id)
        logger.error("re-run generation %s stopped at its time limit (%.1f s left of RERUN_SOFT_TIME_LIMIT_S=%s)",
                     request_id, timeout_s, settings.RERUN_SOFT_TIME_LIMIT_S)
        raise


async def _self_check_bounded(engine, request_id: str, source: str, text: str, deadline: float) -> float | None:
    """The model's check of one candidate (P(yes)) within ``deadline``
    (``time.monotonic()`` seconds); ``None`` when the time is up or the
    engine fails (the candidate is then ranked without it)."""
    try:
        return await asyncio.wait_for(self_check_run(engine, request_id, source, text, background=False),
                                      timeout=max(deadline - time.monotonic(), 0.001))
    except TimeoutError:
        await engine.abort(request_id)
        logger.warning("re-run self-check %s stopped at the time limit", request_id)
    except EngineError as exc:
        logger.warning("re-run self-check %s failed: %s", request_id, type(exc).__name__)
    return None


async def _plan_generate(engine, request_id: str, plan, deadline: float) -> tuple[str, list[float]]:
    """A candidate's text and token logprobs: one request, or, for a
    translation generated sentence by sentence, one request per part in
    order, joined as the fast run joined them
    (:func:`inference.parts.translation_parts_join`), all within
    ``deadline`` (``time.monotonic()`` seconds).

    Raises:
        TimeoutError, inference.EngineError: as :func:`_generate_bounded`.
    """
    if not plan.parts:
        generated = await _generate_bounded(engine, request_id, plan.messages, plan.params,
                                            timeout_s=deadline - time.monotonic())
        return generated.text, generated.token_logprobs
    texts, logprobs, cut = [], [], []
    for index, part in enumerate(plan.parts, start=1):
        generated = await _generate_bounded(engine, f"{request_id}-{index}", part.messages, plan.params,
                                            timeout_s=deadline - time.monotonic())
        texts.append(generated.text)
        logprobs.extend(generated.token_logprobs)
        cut.append(generated.finish_reason == "length")
    return translation_parts_join(list(plan.parts), texts, cut=cut), logprobs


def rerun_candidates_run(*, translation: Translation, engine, request_prefix: str,
                         names: tuple[str, ...] | None = None, time_limit_s: float | None = None,
                         messages: list[dict[str, str]] | list[TranslationPart] | None = None,
                         pool=None) -> tuple[rerun_candidates.Candidate, list[dict]]:
    """Generate and measure the candidates ``names`` (default
    ``RERUN_CANDIDATES``) for ``translation`` in order on ``engine``, and
    pick one (:func:`clinical.rerun.candidates.candidate_select`).

    Where the re-run's choice is still doubted, a candidate that is the
    input unchanged and that the model trusts is delivered instead
    (:func:`clinical.rerun.candidates.candidate_select`), and where there is
    none, the diagnosis as written (:func:`clinical.rerun.candidates.candidate_as_written`;
    ``SELF_CHECK_COPY``: ``always``, ``trusted`` for the first only, ``off``).

    Where the gate reads the model's own check for the translation (the
    threshold stored with it, :attr:`clinical.models.Translation.self_check_threshold`,
    else :func:`clinical.quality.gate.self_check_threshold`), each candidate is
    checked the same way on ``engine`` (one prompt and one token), and
    the early stop and the choice read it.

    Stops early once a candidate is good enough
    (:func:`clinical.rerun.candidates.candidate_good_enough`). All of them
    share one time budget, ``time_limit_s`` (default
    ``RERUN_SOFT_TIME_LIMIT_S``) seconds from the start: a candidate that
    runs past it, or whose engine request fails, ends the search with the
    candidates already measured. When none of ``names`` applies to the
    translation, ``full_precision`` runs instead.

    Args:
        translation: the translation being re-run.
        engine: a started :class:`inference.base.Engine`.
        request_prefix: engine request ids are ``<prefix>-<candidate name>``.
        messages, pool: see :func:`clinical.rerun.candidates.candidate_plan`
            (the product passes neither).

    A fast text that passed both checks stands unless a candidate is
    clearly better (:func:`clinical.rerun.candidates.incumbent_for`); the
    candidate returned is then the fast text itself, named
    :data:`~clinical.rerun.candidates.FAST_TEXT`, without logprobs.

    Returns:
        ``(chosen candidate, records)``: ``records`` has one entry per
        candidate in ``names`` that was tried or skipped (``{"name",
        "skipped"}``, ``{"name", "outcome": "timeout"|"engine_error"}``, or
        :meth:`~clinical.rerun.candidates.Candidate.record`).

    Raises:
        TimeoutError: the time budget ran out before any candidate finished.
        inference.EngineError: the engine failed before any candidate finished.
        django.core.exceptions.ImproperlyConfigured: ``RERUN_CANDIDATES`` names
            an unknown candidate.
    """
    names = names or rerun_candidates.candidate_names()
    incumbent = rerun_candidates.incumbent_for(translation)
    # The threshold the fast text was gated by, so "doubted" means the same for it and the kept text.
    check_threshold = (translation.self_check_threshold if translation.self_check_threshold is not None
                       else gate.self_check_threshold(translation.model_name, translation.prompt_version))
    rerun_reasons = rerun_sentences.sentences_to_rerun(translation, check_threshold) if messages is None else {}
    if rerun_reasons:
        return rerun_sentences_run(translation=translation, engine=engine, request_prefix=request_prefix,
                                   names=names, time_limit_s=time_limit_s, reasons=rerun_reasons,
                                   threshold=check_threshold)
    budget_s = settings.RERUN_SOFT_TIME_LIMIT_S if time_limit_s is None else time_limit_s
    deadline = time.monotonic() + budget_s
    measured: list[rerun_candidates.Candidate] = []
    records: list[dict] = []
    for name in names:
        plan = rerun_candidates.candidate_plan(translation=translation, name=name, messages=messages, pool=pool)
        if plan.skipped:
            records.append({"name": name, "skipped": plan.skipped})
            continue
        started = time.perf_counter()
        try:
            text, logprobs = run_in_engine_loop(_plan_generate(
                engine, f"{request_prefix}-{name}", plan, deadline))
        except (TimeoutError, EngineError) as exc:
            if not measured:
                raise
            outcome = "timeout" if isinstance(exc, TimeoutError) else "engine_error"
            logger.warning("re-run candidate %s ended the search: %s", name, outcome)
            records.append({"name": name, "outcome": outcome})
            break
        ms = (time.perf_counter() - started) * 1000
        replaced = None
        if name == rerun_candidates.SPAN_REPLACEMENT:
            heading, sentence = rerun_candidates.copied_heading(translation)  # the heading is not rewritten
            text, replaced = rerun_candidates.span_candidate_text(text=sentence, answer=text,
                                                                  language=translation.language)
            text = heading + text
        elif not plan.parts:  # one request: start it as the joined fast text starts
            text = line_start_capitalized(text.strip())
        p_yes = None
        if check_threshold is not None and text.strip():
            p_yes = run_in_engine_loop(_self_check_bounded(engine, f"{request_prefix}-{name}-check",
                                                           translation.input_text, text.strip(), deadline))
        candidate = rerun_candidates.candidate_measure(translation=translation, name=name, text=text,
                                                       logprobs=logprobs, ms=ms, prompt_version=plan.prompt_version,
                                                       replaced=replaced, self_check=p_yes)
        measured.append(candidate)
        records.append(candidate.record())
        logger.info("re-run candidate %s safety=%s faithfulness=%s confidence=%s self_check=%s tokens=%d ms=%.0f",
                    name, candidate.quality.safety.passed, candidate.quality.faithfulness.passed,
                    None if candidate.confidence is None else round(candidate.confidence, 3),
                    None if p_yes is None else round(p_yes, 3), len(logprobs), ms)
        if rerun_candidates.candidate_good_enough(candidate, model_name=translation.model_name,
                                                  incumbent=incumbent, self_check_threshold=check_threshold):
            break
    if not measured:  # none of the candidates named applies (say, retrieved examples for two sentences)
        chosen, fallback = rerun_candidates_run(translation=translation, engine=engine, request_prefix=request_prefix,
                                                names=(rerun_candidates.FULL_PRECISION,),
                                                time_limit_s=deadline - time.monotonic(), messages=messages)
        return chosen, records + fallback
    copy = settings.SELF_CHECK_COPY
    chosen = rerun_candidates.candidate_select(measured, reading_level=translation.reading_level,
                                               incumbent=incumbent,
                                               self_check_threshold=check_threshold if copy != "off" else None)
    as_written = rerun_candidates.candidate_as_written(translation=translation, chosen=chosen,
                                                       self_check_threshold=check_threshold) if copy == "always" else None
    if as_written is not None:
        logger.info("re-run keeps the diagnosis as written: the model's own check doubts the text it would deliver")
        return as_written, records + [as_written.record()]
    if chosen is None:  # the fast text passed both checks and no candidate was clearly better
        chosen = rerun_candidates.candidate_measure(
            translation=translation, name=rerun_candidates.FAST_TEXT, text=translation.output_text, logprobs=[],
            ms=0.0, prompt_version=translation.prompt_version, self_check=translation.self_check)
    return chosen, records


def rerun_sentences_run(*, translation: Translation, engine, request_prefix: str, names: tuple[str, ...],
                        time_limit_s: float | None, reasons: dict[int, list[str]],
                        threshold: float | None) -> tuple[rerun_candidates.Candidate, list[dict]]:
    """Re-run a note sentence by sentence (:mod:`clinical.rerun.sentences`):
    each sentence of ``reasons`` (index from 0: why the one-sentence gate
    would re-run it, :func:`clinical.rerun.sentences.sentences_to_rerun`) goes
    through :func:`rerun_candidates_run` as a one-sentence translation, in
    order, sharing one time budget; the others keep their streamed text. A
    sentence still doubted is given as written (``SELF_CHECK_COPY=always``),
    so one doubted sentence no longer turns a whole note into the diagnosis
    as written.

    Returns:
        ``(candidate, records)``: the candidate is named
        :data:`clinical.models.RERUN_SENTENCES`, its text the joined note,
        its P(yes) the lowest of its sentences' that were checked (the
        kept ones' and the re-run ones'), ``None`` when none was; ``records``
        are each re-run sentence's candidate records with ``"sentence"`` (from
        1), then ``{"sentence", "kept", "self_check", "reason", "answer"}``
        naming the one it kept, why the sentence was re-run (its
        ``rerun_reason``) and the sentence's text in the note, without its
        copied heading (so the note's sentences can be shown side by side,
        :mod:`clinical.translation.alignment`).

    Raises:
        TimeoutError, inference.EngineError: as :func:`rerun_candidates_run`,
        for the first sentence re-run. A later one whose search fails, or
        that the budget no longer reaches, is given as written where it is
        doubted (``SELF_CHECK_COPY=always``), else keeps its streamed text.
    """
    budget_s = settings.RERUN_SOFT_TIME_LIMIT_S if time_limit_s is None else time_limit_s
    deadline = time.monotonic() + budget_s
    checks = translation.sentence_checks
    answers = [check["answer"] for check in checks]
    cuts = [bool(check.get("cut")) for check in checks]
    p_yes = [check.get("p_yes") for check in checks]
    logprobs: list[float] = []
    records: list[dict] = []
    started = time.perf_counter()
    for n, (index, why) in enumerate(reasons.items()):
        sentence = rerun_sentences.sentence_translation(translation, index, why)
        try:
            if deadline - time.monotonic() <= 0:
                raise TimeoutError("re-run time budget spent")
            chosen, tried = rerun_candidates_run(translation=sentence, engine=engine,
                                                 request_prefix=f"{request_prefix}-s{index + 1}", names=names,
                                                 time_limit_s=deadline - time.monotonic())
        except (TimeoutError, EngineError) as exc:
            if n == 0:
                raise
            logger.warning("re-run of a note's sentence ended the search: %s", type(exc).__name__)
            records.append({"sentence": index + 1, "outcome": "timeout" if isinstance(exc, TimeoutError)
                            else "engine_error"})
            chosen, tried = None, []
            if settings.SELF_CHECK_COPY == "always":
                chosen = rerun_candidates.candidate_as_written(translation=sentence, chosen=None,
                                                               self_check_threshold=threshold)
            if chosen is None:  # not doubted (a failed check sent it): its streamed text stays
                continue
        records += [{**record, "sentence": index + 1} for record in tried]
        if chosen.name != rerun_candidates.FAST_TEXT:
            answers[index] = rerun_sentences.sentence_answer(sentence, chosen.text)
            cuts[index] = False
            p_yes[index] = chosen.self_check
            logprobs += chosen.logprobs
        records.append({"sentence": index + 1, "kept": chosen.name, "self_check": chosen.self_check,
                        "reason": sentence.rerun_reason, "answer": answers[index]})
    checked = [p for p in p_yes if p is not None]
    text = rerun_sentences.sentences_join(translation, answers, cuts)
    return rerun_candidates.candidate_measure(
        translation=translation, name=RERUN_SENTENCES, text=text, logprobs=logprobs,
        ms=(time.perf_counter() - started) * 1000, prompt_version=translation.prompt_version,
        self_check=min(checked) if checked else None), records


def rerun_execute(*, translation_id: int) -> Rerun | None:
    """The task body: run the re-run's candidates on the worker's engine
    (:func:`rerun_candidates_run`) and record the one kept.

    Returns:
        The completed re-run, or ``None`` if there was nothing to do.

    Raises:
        inference.EngineError: generation failed before any candidate
            finished (the task retries).
        TimeoutError: it ran past ``RERUN_SOFT_TIME_LIMIT_S`` before any
            candidate finished (not retried).
    """
    rerun = rerun_start(translation_id=translation_id)
    if rerun is None:
        logger.info("re-run of translation %s has nothing to do", translation_id)
        return None
    translation = rerun.translation
    # This task's log lines carry its translation's id, and only its own:
    # a solo-pool worker runs every task in one thread, whose context would
    # otherwise tag the next task's first lines ("received") with this id.
    token = request_id_var.set(str(translation.request_id))
    try:
        rerun_notify(translation=translation)
        engine = rerun_engine_get()
        started = time.perf_counter()
        chosen, records = rerun_candidates_run(
            translation=translation, engine=engine,
            request_prefix=f"{translation.request_id}-{RERUN_PRECISION}-{rerun.attempts}")
        duration_ms = (time.perf_counter() - started) * 1000
        kept_fast = chosen.name == rerun_candidates.FAST_TEXT
        done = rerun_complete(rerun_id=rerun.pk, output_text=chosen.text, token_logprobs=list(chosen.logprobs),
                              confidence=translation.confidence if kept_fast else None,
                              duration_ms=duration_ms, engine=engine.info.engine, model_name=engine.info.model,
                              candidate=chosen.name, candidates=records, engine_precision=engine.info.precision,
                              self_check=chosen.self_check)
        logger.info("re-run completed precision=%s candidate=%s tried=%d tokens=%d duration_ms=%.0f attempt=%d",
                    RERUN_PRECISION, chosen.name, _tried(records),
                    len(chosen.logprobs), duration_ms, done.attempts)
        return done
    finally:
        request_id_var.reset(token)


def _tried(records: list[dict]) -> int:
    """How many candidates the model generated: records of a candidate
    neither skipped nor the diagnosis as written (which no model wrote),
    nor a note's per-sentence summaries."""
    return sum(1 for r in records if r.get("name") and "skipped" not in r
               and r["name"] != rerun_candidates.AS_WRITTEN)

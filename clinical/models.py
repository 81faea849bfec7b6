"""Database models of the clinical translation service."""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db import models
from django.utils import timezone
from rest_framework_api_key.models import AbstractAPIKey

from inference.examples import (
    DEFAULT_K,
    NoteSentence,
    cluster_messages,
    default_pool,
    default_router,
    heading_split,
    note_sentences,
)
from inference.prompts import (
    DEFAULT_LANGUAGE,
    DEFAULT_READING_LEVEL,
    EXAMPLES_PROMPT_VERSION,
    LANGUAGES,
    PROMPT_VERSION,
    READING_LEVELS,
    ClusterPrompt,
    build_messages,
)


class APIClient(AbstractAPIKey):
    """A machine client (an EHR system) of the REST API.

    The secret is shown once when IT creates the client in the admin and is
    stored hashed (djangorestframework-api-key); clients send
    ``Authorization: Bearer <prefix>.<secret>``. Scopes: ``translate``
    (POST) and ``read`` (GET). ``throttle_rate`` is DRF's rate syntax, e.g.
    ``60/min``.
    """

    scope_translate = models.BooleanField(default=True, help_text="May request translations.")
    scope_read = models.BooleanField(default=True, help_text="May read its own translations.")
    throttle_rate = models.CharField(max_length=20, default="60/min",
                                     help_text="Requests allowed per client, e.g. 60/min or 1000/hour.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta(AbstractAPIKey.Meta):
        verbose_name = "API client"
        verbose_name_plural = "API clients"

    @property
    def scopes(self) -> set[str]:
        return {s for s, ok in (("translate", self.scope_translate), ("read", self.scope_read)) if ok}


class Translation(models.Model):
    """One diagnosis text turned into a plain-language explanation.

    A row is created when a request is accepted (status ``pending``) and is
    finalised exactly once, with ``completed``, ``cancelled`` or ``error``
    and the measured figures. Timings are milliseconds from the moment the
    server received the request; token counts are model tokens.
    """

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        COMPLETED = "completed", "Completed"
        CANCELLED = "cancelled", "Cancelled"
        ERROR = "error", "Error"

    class Source(models.TextChoices):
        WEB = "web", "Web page"
        CLI = "cli", "Command line"
        API = "api", "REST API"

    class Verification(models.TextChoices):
        NOT_NEEDED = "not_needed", "Not needed"
        PENDING = "pending", "Verification pending"
        RUNNING = "running", "Verifying"
        VERIFIED = "verified", "Verified"
        FAILED = "failed", "Verification failed"

    FINAL_STATUSES = (Status.COMPLETED, Status.CANCELLED, Status.ERROR)

    request_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
        related_name="translations",
        help_text="Clinician who asked; empty for command-line requests.",
    )
    api_client = models.ForeignKey(APIClient, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="translations", help_text="EHR client, for API requests.")
    source = models.CharField(max_length=8, choices=Source.choices, default=Source.WEB)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    input_text = models.TextField()
    reading_level = models.PositiveSmallIntegerField(
        default=DEFAULT_READING_LEVEL, choices=[(g, f"Grade {g}") for g in READING_LEVELS],
        help_text="US school grade the explanation is written for.")
    language = models.CharField(max_length=8, default=DEFAULT_LANGUAGE, choices=list(LANGUAGES.items()))
    output_text = models.TextField(blank=True)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING, db_index=True)
    finish_reason = models.CharField(max_length=16, blank=True, help_text="stop, length or abort")
    error_class = models.CharField(max_length=120, blank=True)

    engine = models.CharField(max_length=32, blank=True)
    model_name = models.CharField(max_length=200, blank=True)
    precision = models.CharField(max_length=32, blank=True)
    prompt_version = models.CharField(max_length=32, blank=True)

    queue_wait_ms = models.FloatField(null=True, blank=True, help_text="received → engine admitted (ms)")
    ttft_ms = models.FloatField(null=True, blank=True, help_text="received → first token (ms)")
    total_ms = models.FloatField(null=True, blank=True, help_text="received → last token (ms)")
    tokens_in = models.PositiveIntegerField(null=True, blank=True)
    tokens_out = models.PositiveIntegerField(null=True, blank=True)
    confidence = models.FloatField(
        null=True, blank=True,
        help_text="Geometric-mean token probability of the output, in (0, 1].",
    )
    self_check = models.FloatField(
        null=True, blank=True,
        help_text="The model's own check of the output: P(yes) to \"does the rewrite say the same thing?\" "
                  "(inference.self_check), in [0, 1]; empty when it did not run.")
    self_check_version = models.CharField(max_length=32, blank=True,
                                          help_text="Version of the self-check question that gave self_check.")
    sentence_checks = models.JSONField(
        null=True, blank=True,
        help_text='A note of several sentences, checked sentence by sentence (self_check is the lowest '
                  'P(yes)): [{"input", "answer", "cut", "p_yes"}] in order, "answer" the model\'s text for '
                  'the sentence without its copied heading, "cut" whether it stopped at the token limit, '
                  '"p_yes" null where the check did not run. Empty for one sentence.')
    self_check_threshold = models.FloatField(
        null=True, blank=True,
        help_text="The P(yes) below which the gate re-ran the output and the re-run kept looking "
                  "(clinical.quality.gate.self_check_threshold when it completed); a text below it "
                  "is shown as doubted. Empty where the gate read the confidence.")
    verification = models.CharField(
        max_length=12, choices=Verification.choices, default=Verification.NOT_NEEDED, db_index=True,
        help_text="Full-precision re-run state; set when confidence is below the threshold "
                  "or the safety check failed.",
    )

    # --- Reading level, safety check and glossary (clinical.quality.readability,
    # clinical.quality.safety, clinical.quality.glossary); computed when the output completes.
    input_fkgl = models.FloatField(null=True, blank=True,
                                   help_text="Flesch-Kincaid grade level of the input (textstat).")
    output_fkgl = models.FloatField(null=True, blank=True,
                                    help_text="Flesch-Kincaid grade level of the output; English output only.")
    output_readability = models.FloatField(
        null=True, blank=True, help_text="The output's score on readability_measure (grade for fkgl, "
                                         "0-100 ease for szigriszt_pazos).")
    readability_measure = models.CharField(
        max_length=24, blank=True,
        help_text='"fkgl" (English output), "szigriszt_pazos" (Spanish output) or "" (none; see the note).')
    readability_note = models.CharField(max_length=200, blank=True,
                                        help_text="Why no measure was computed, or how to read it.")
    safety_passed = models.BooleanField(
        null=True, blank=True,
        help_text="Every number+unit, dose, drug, laterality and negation of the input is in the output.")
    safety_missing = models.JSONField(default=list, blank=True,
                                      help_text='Missing items: [{"kind", "text"}].')
    faithfulness_passed = models.BooleanField(
        null=True, blank=True,
        help_text="The output states no number, unit, drug, side, body site, vital sign, organ failure, "
                  "direction (up/down), negation or person the input does not (clinical.quality.faithfulness).")
    faithfulness_flags = models.JSONField(default=list, blank=True,
                                          help_text='Statements not in the input: [{"kind", "text", "start", '
                                                    '"end", "detail"}].')
    glossary = models.JSONField(default=list, blank=True,
                                help_text='Medical terms of the input: [{"term", "definition", "source"}].')
    rerun_reason = models.CharField(
        max_length=64, blank=True,
        help_text='Why the full-precision re-run was queued: "low_self_check" (or "low_confidence" where '
                  'the self-check did not run), "safety_failed", "faithfulness_failed", comma-separated.')

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(confidence__isnull=True)
                | (models.Q(confidence__gt=0) & models.Q(confidence__lte=1)),
                name="translation_confidence_in_unit_interval",
            ),
            models.CheckConstraint(
                condition=models.Q(self_check__isnull=True)
                | (models.Q(self_check__gte=0) & models.Q(self_check__lte=1)),
                name="translation_self_check_in_unit_interval",
            ),
            models.CheckConstraint(
                condition=models.Q(self_check_threshold__isnull=True)
                | (models.Q(self_check_threshold__gte=0) & models.Q(self_check_threshold__lte=1)),
                name="translation_self_check_threshold_in_unit_interval",
            ),
        ]

    def __str__(self) -> str:
        return f"Translation {self.request_id} ({self.status})"

    @property
    def verified_rerun(self) -> "Rerun | None":
        """The completed full-precision re-run, if any."""
        return next((r for r in self.reruns.all() if r.status == Rerun.Status.COMPLETED), None)

    @property
    def tokens_per_s(self) -> float | None:
        """Decode rate after the first token (tokens/s), or None."""
        if not self.tokens_out or self.tokens_out < 2 or self.total_ms is None or self.ttft_ms is None:
            return None
        decode_ms = self.total_ms - self.ttft_ms
        return (self.tokens_out - 1) / (decode_ms / 1000) if decode_ms > 0 else None


def translation_prompt_version(*, text: str, language: str) -> str:
    """The prompt a new translation gets (stored as its ``prompt_version``).

    English input of 1 to ``PROMPT_MAX_SENTENCES`` sentences
    (:func:`inference.examples.note_sentences`) gets worked examples and is
    generated sentence by sentence: with ``PROMPT_CLUSTERS`` > 0 the
    cluster prefixes (:class:`inference.prompts.ClusterPrompt` of
    ``PROMPT_CLUSTERS``, ``PROMPT_CLUSTER_EXAMPLES``, ``PROMPT_RETRIEVED_K``
    ``PROMPT_HINTS`` and ``PROMPT_HEADINGS``, e.g. ``"2026-11-25.2+c24x8k0h"``), else 6 examples retrieved per
    sentence (:data:`inference.prompts.EXAMPLES_PROMPT_VERSION`; measured
    cross-fitted on laymaker-dev, docs/quality/retrieval.md). Anything else
    (Spanish output: the examples are English; a longer note;
    ``PROMPT_EXAMPLES`` off) gets one request with the instructions and
    one fixed example (:data:`inference.prompts.PROMPT_VERSION`).
    """
    if not settings.PROMPT_EXAMPLES or language != "en":
        return PROMPT_VERSION
    if not 1 <= len(note_sentences(text)) <= settings.PROMPT_MAX_SENTENCES:
        return PROMPT_VERSION
    if settings.PROMPT_CLUSTERS > 0:
        return ClusterPrompt(settings.PROMPT_CLUSTERS, settings.PROMPT_CLUSTER_EXAMPLES,
                             settings.PROMPT_RETRIEVED_K, hints=settings.PROMPT_HINTS,
                             headings=settings.PROMPT_HEADINGS).version
    return EXAMPLES_PROMPT_VERSION


@dataclass(frozen=True, slots=True)
class TranslationPart:
    """One request of a translation: generated after the one before it,
    its text streamed after that one's.

    Attributes:
        separator: put between the previous part's explanation and this
            one's (``""`` for the first; ``" "`` or the note's line break;
            :class:`inference.examples.NoteSentence`).
        messages: the chat messages of the request.
        prefix: text copied verbatim before the request's answer (the
            sentence's section headings, :func:`inference.examples.heading_split`;
            ``""`` for none).
        source: the input this request explains, headings included (the
            note's unit, :class:`inference.examples.NoteSentence`, or the
            whole input); ``""`` where not given.
    """

    separator: str
    messages: list[dict[str, str]]
    prefix: str = ""
    source: str = ""


def translation_parts(translation: Translation) -> list[TranslationPart]:
    """The requests of a translation, in order, rendered from its stored
    input, reading level, language and ``prompt_version`` only (so the fast
    run and the full-precision re-run send the same messages, whatever the
    settings are now).

    * ``2026-11-25.2+c…`` and ``2026-11-25.3+c…`` (:class:`inference.prompts.ClusterPrompt`): one
      part per sentence (:func:`inference.examples.note_sentences`), each
      with its cluster's prefix (:func:`inference.examples.cluster_messages`
      on the shipped pool's clusters for the stored settings; deterministic,
      fitted once per process). With the ``h`` suffix a sentence's leading
      headings are the part's ``prefix`` and the model gets the rest
      (:func:`inference.examples.heading_split`).
    * :data:`inference.prompts.EXAMPLES_PROMPT_VERSION`: one part per
      sentence, each with the ``DEFAULT_K`` most similar pool examples.
    * anything else: one part, the whole text with the instructions of
      ``PROMPT_VERSION``.

    A one-sentence input is rendered from ``input_text`` itself, exactly as
    before sentence splitting existed.

    Raises:
        ValueError: a cluster version whose settings do not fit the pool
            (more clusters than rows).
    """
    options = {"reading_level": translation.reading_level, "language": translation.language}
    cluster = ClusterPrompt.parse(translation.prompt_version)
    if cluster is None and translation.prompt_version != EXAMPLES_PROMPT_VERSION:
        return [TranslationPart("", build_messages(translation.input_text, **options),
                                source=translation.input_text)]
    units = note_sentences(translation.input_text)
    if len(units) <= 1:
        units = [NoteSentence(translation.input_text, "")]
    if cluster is not None:
        router = default_router(cluster.clusters, cluster.per_cluster)
        parts = []
        for unit in units:
            prefix, sentence = heading_split(unit.text) if cluster.headings else ("", unit.text)
            parts.append(TranslationPart(unit.separator, cluster_messages(
                sentence, router=router, k=cluster.k, hints=cluster.hints, **options), prefix, unit.text))
        return parts
    pool = default_pool()
    return [TranslationPart(u.separator, build_messages(u.text, examples=pool.retrieve(u.text, k=DEFAULT_K),
                                                        **options), source=u.text)
            for u in units]


def translation_message_parts(translation: Translation) -> list[list[dict[str, str]]]:
    """The chat messages of each request of a translation, in order (see
    :func:`translation_parts`): one list per sentence for the example
    prompts, a one-element list for one sentence or the ``PROMPT_VERSION``
    prompt. A re-run that reproduces the translation generates each and
    joins the answers with :func:`translation_parts_join`, as
    :func:`clinical.translation.generation.translation_generate` does."""
    return [part.messages for part in translation_parts(translation)]


#: A text that ends a sentence: . ! ? or an ellipsis, maybe inside
#: closing quotes or brackets.
SENTENCE_END = r"[.!?\u2026]['\"\u201d\u2019)\]]*$"
_SENTENCE_END = re.compile(SENTENCE_END)
#: Where no period is added: the end of a sentence, or a clause mark
#: (comma, colon, semicolon, dash, an opening bracket) that a period after
#: it would not mend.
_OPEN_END = re.compile(SENTENCE_END + r"|[,:;\-\u2013\u2014(\[]$")


_LOWER_FIRST_WORD = re.compile(r"[a-z]+(?![A-Za-z0-9])")
#: An answer's text so far that may still be the start of a longer first
#: word ("p" of "pH", "x" of "x2"): lower-case letters only.
_OPEN_FIRST_WORD = re.compile(r"[a-z]+")


def line_start_capitalized(text: str) -> str:
    """``text`` with its first word capitalised when that word is all in
    lower-case letters ("the patient denies..." -> "The patient denies...";
    the model often copies the lower-case rewrites of its examples). A word
    with a capital or a digit in it ("pH", "mL", "x2") is left as written."""
    if _LOWER_FIRST_WORD.match(text):
        return text[0].upper() + text[1:]
    return text


class TextJoiner:
    """Joins the streamed pieces of several requests into one text, the
    way it is stored: each request's text without its leading and trailing
    whitespace, after its separator (only once it has text, so an empty
    answer adds nothing) and its part's verbatim prefix, which is streamed
    with the answer's first text (so every streamed piece carries model
    text, and an empty answer drops its heading too). Whitespace at the
    end of a piece is held back until more text of the same request
    follows, so what is streamed, put together, is exactly the stored text.

    Sentences of one line (separator ``" "``) keep their boundary: where
    the text so far ends without a sentence's end (:data:`SENTENCE_END`)
    and not on a comma, a period goes before the separator, and an answer
    that then starts with a lower-case word (and has no copied heading)
    gets a capital ("soft, not painful. No enlarged liver", not "soft, not
    painful no enlarged liver"). After an answer cut at the token limit
    the mark is an ellipsis instead ("There is… Stable."), so the cut
    shows. Line breaks are kept as written: notes list findings line by
    line without periods. An answer that starts the text or a line (and
    has no copied heading) starts with a capital too. Both capitals follow
    one rule (:func:`line_start_capitalized`): a first word with a capital
    or a digit ("pH", "mL", "x2") is left as written.

    That rule reads the answer's whole first word, which the engine may
    stream in fragments ("p", "H"): an answer that starts with lower-case
    letters is held back until its first word ends (a space or mark in a
    later piece, or :meth:`end`), so such a word reaches the screen one
    token after the engine sent it. TTFT is measured at the engine's first
    token (``clinical.translation.generation.StreamMeter``), not here.
    """

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self._separator = ""
        self._pending = ""
        self._head = ""  # the answer's first text, held until its first word ends
        self._started = False
        self._prefix = ""
        self._after_cut = False

    def begin(self, separator: str, prefix: str = "", *, after_cut: bool = False) -> None:
        """A new request starts; its text goes after ``separator`` and
        ``prefix`` (:attr:`TranslationPart.prefix`). ``after_cut``: the
        previous request's answer stopped at the token limit. The previous
        request's answer is ended first (:meth:`end`; a caller that streams
        calls that itself, to stream what it returns)."""
        self.end()
        self._separator, self._pending, self._head, self._started = separator, "", "", False
        self._prefix = prefix.lstrip()
        self._after_cut = after_cut

    def feed(self, text: str) -> str:
        """The part of ``text`` to stream now (possibly empty)."""
        if self._started:
            return self._show(self._pending + text)
        self._head = (self._head + text).lstrip()
        if self._prefix or not _OPEN_FIRST_WORD.fullmatch(self._head):
            return self._start()
        return ""  # "p" may begin "pH": wait for the word's end

    def end(self) -> str:
        """The request's answer is complete: the part held back to stream
        now (a one-word answer such as "stable"), possibly empty."""
        return "" if self._started else self._start()

    def _start(self) -> str:
        text, self._head = self._head, ""
        if not text:
            return ""
        separator = self._separator if self.pieces else ""
        capital = not self._prefix and (not self.pieces or "\n" in separator)
        if separator == " ":  # the same line: the previous sentence ends here
            previous = self.pieces[-1]
            if self._after_cut or not _OPEN_END.search(previous):
                separator = ("\u2026" if self._after_cut else ".") + separator
            capital = not self._prefix and bool(_SENTENCE_END.search(separator.rstrip() or previous))
        if capital:
            text = line_start_capitalized(text)
        self._started = True
        return self._show(separator + self._prefix + text)

    def _show(self, text: str) -> str:
        shown = text.rstrip()
        self._pending = text[len(shown):]
        if shown:
            self.pieces.append(shown)
        return shown

    @property
    def text(self) -> str:
        """Everything streamed so far."""
        return "".join(self.pieces)


def translation_parts_join(parts: list[TranslationPart], texts: list[str], *, cut: Sequence[bool] = ()) -> str:
    """The one text of a translation from its parts' answers, joined by
    the :class:`TextJoiner` the fast run streams through, so a re-run's
    text is put together exactly as the fast text was stored.

    Args:
        parts: :func:`translation_parts` of the translation.
        texts: the answer to each part, in order (as many as ``parts``).
        cut: for each part, whether its answer stopped at the token limit
            (finish reason ``"length"``), so the next sentence follows an
            ellipsis as in the stream; empty: none was.

    Raises:
        ValueError: not one text per part, or ``cut`` neither empty nor
            one flag per part.
    """
    if len(parts) != len(texts):
        raise ValueError(f"{len(texts)} texts for {len(parts)} parts")
    if cut and len(cut) != len(parts):
        raise ValueError(f"{len(cut)} cut flags for {len(parts)} parts")
    joiner = TextJoiner()
    for index, (part, text) in enumerate(zip(parts, texts)):
        joiner.begin(part.separator, part.prefix, after_cut=bool(cut) and index > 0 and cut[index - 1])
        joiner.feed(text)
        joiner.end()
    return joiner.text


def translation_messages(translation: Translation) -> list[dict[str, str]]:
    """The chat messages of a translation made in one request (the fast
    run and the full-precision re-run use the same).

    Raises:
        ValueError: the translation was generated sentence by sentence in
            several requests, or its part has a verbatim heading; use
            :func:`translation_parts` (a single request of the first
            sentence would re-run only part of the text).
    """
    parts = translation_parts(translation)
    if len(parts) != 1 or parts[0].prefix:
        raise ValueError(f"translation {translation.pk} was generated in {len(parts)} requests, one per "
                         "sentence or with a verbatim heading: use translation_message_parts and translation_parts")
    return parts[0].messages


#: ``Rerun.precision`` of the confidence gate's re-run (the design's FP32).
RERUN_PRECISION = "fp32"
#: ``Rerun.candidate`` when the re-run kept the fast text, which passed both
#: checks and no candidate was clearly better (clinical.rerun.candidates.Incumbent).
RERUN_KEPT_FAST_TEXT = "fast_text"
#: ``Rerun.candidate`` when the model's own check still doubted the text the
#: re-run would deliver and the diagnosis as written was kept instead
#: (clinical.rerun.candidates.candidate_as_written).
RERUN_AS_WRITTEN = "as_written"
#: ``Rerun.candidate`` when a note of several sentences was re-run sentence
#: by sentence: only the sentences the model's own check doubted or a check
#: failed on, each as a one-sentence re-run (clinical.rerun.sentences).
RERUN_SENTENCES = "sentences"


class Rerun(models.Model):
    """A full-precision re-generation of a low-confidence translation.

    Created with the translation's final row when its confidence is below
    ``CONFIDENCE_THRESHOLD``; run by the Celery task
    ``clinical.tasks.translation_verify`` on the ``rerun`` queue. At most one
    per (translation, precision), so a redelivered task cannot produce a
    second result. Timings in ms.
    """

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        COMPLETED = "completed", "Completed"
        FAILED = "failed", "Failed"

    translation = models.ForeignKey(Translation, on_delete=models.CASCADE, related_name="reruns")
    precision = models.CharField(max_length=16, default="fp32")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED)
    attempts = models.PositiveSmallIntegerField(default=0, help_text="Times a worker started it.")
    enqueued_at = models.DateTimeField(auto_now_add=True)
    dispatched_at = models.DateTimeField(
        null=True, blank=True,
        help_text="When its task reached the broker; empty while it has not (broker unreachable): "
                  "the sweep re-dispatches it (clinical.rerun.dispatch.reruns_redispatch).")
    broker_epoch = models.CharField(
        max_length=32, blank=True, default="",
        help_text="The broker's epoch when its task was sent (clinical.rerun.broker): a queued re-run sent under "
                  "an older epoch was lost with the broker's data and is sent again by the sweep.")
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    queue_wait_ms = models.FloatField(null=True, blank=True, help_text="enqueued → first started (ms)")
    duration_ms = models.FloatField(null=True, blank=True, help_text="generation time of the run that completed (ms)")
    output_text = models.TextField(blank=True)
    confidence = models.FloatField(null=True, blank=True)
    self_check = models.FloatField(null=True, blank=True,
                                   help_text="The worker model's own check of the kept text: P(yes), in [0, 1].")
    tokens_out = models.PositiveIntegerField(null=True, blank=True)
    engine = models.CharField(max_length=32, blank=True)
    model_name = models.CharField(max_length=200, blank=True)
    error_class = models.CharField(max_length=120, blank=True)
    # The re-run's output is checked again (clinical.quality.readability, clinical.quality.safety).
    output_fkgl = models.FloatField(null=True, blank=True, help_text="FKGL of the output; English only.")
    output_readability = models.FloatField(null=True, blank=True,
                                           help_text="Score on the translation's readability_measure.")
    safety_passed = models.BooleanField(null=True, blank=True)
    safety_missing = models.JSONField(default=list, blank=True, help_text='[{"kind", "text"}]')
    faithfulness_passed = models.BooleanField(null=True, blank=True)
    faithfulness_flags = models.JSONField(default=list, blank=True,
                                          help_text='[{"kind", "text", "start", "end", "detail"}]')
    # The candidates the re-run tried (clinical.rerun.candidates) and the one kept as output_text.
    candidate = models.CharField(
        max_length=32, blank=True,
        help_text="The candidate whose text is output_text: full_precision, retrieved_examples, "
                  "span_replacement or sampled; fast_text (the fast text stands) or as_written (the "
                  "diagnosis as written, where the model's own check doubted the text); sentences (a "
                  "note re-run sentence by sentence, each record naming its sentence) "
                  "(clinical.rerun.candidates).")
    candidates = models.JSONField(
        default=list, blank=True,
        help_text='Every candidate tried, in order, without its text: [{"name", "safety_passed", '
                  '"faithfulness_passed", "safety_missing", "faithfulness_flags", "confidence", "tokens", '
                  '"ms", "fkgl", "prompt_version"}] or [{"name", "skipped"}].')
    engine_precision = models.CharField(
        max_length=32, blank=True,
        help_text="The worker engine's own precision label (e.g. fp32, q4_k_m); precision stays the lookup key.")
    change_note = models.TextField(
        blank=True, help_text="Why the text changed, in plain words, as the clinician is told "
                              "(clinical.frames.rerun_change_note).")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["translation", "precision"], name="rerun_one_per_precision"),
        ]
        indexes = [
            # The sweep's query (clinical.rerun.dispatch.reruns_redispatch): only the
            # few re-runs still waiting for a worker are indexed.
            models.Index(fields=["enqueued_at"], name="rerun_queued", condition=models.Q(status="queued")),
        ]

    @property
    def precision_label(self) -> str:
        """The precision to show for this re-run: the label its engine
        reported after load (``engine_precision``, e.g. ``"fp32"``,
        ``"bf16"``, ``"fp8 (compressed-tensors)"``), else, for a re-run
        recorded before engines reported one or one that never ran, the
        lookup key ``precision`` (:data:`RERUN_PRECISION`)."""
        return self.engine_precision or self.precision

    def __str__(self) -> str:
        return f"Rerun {self.precision} of {self.translation.request_id} ({self.status})"


class AppendOnlyError(RuntimeError):
    """An audit record may be written once and never changed or removed."""


class AuditEventQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise AppendOnlyError("audit events cannot be updated")

    def delete(self):
        raise AppendOnlyError("audit events cannot be deleted")


class AuditEvent(models.Model):
    """Append-only audit record (one per request, plus one per verification
    outcome and per access to clinical text by IT).

    Holds no clinical text: the input is identified by its SHA-256 and
    length. Written in the same transaction as the change it records.
    Updates and deletes raise :class:`AppendOnlyError` in the model layer;
    on PostgreSQL a trigger refuses them in the database too. Timings in ms.
    """

    class EventType(models.TextChoices):
        TRANSLATION = "translation", "Translation request"
        VERIFICATION = "verification", "Full-precision verification"
        TEXT_ACCESS = "text_access", "Clinical text viewed in admin"
        HANDOUT_EDIT = "handout_edit", "Handout text edited by the clinician"

    class Outcome(models.TextChoices):
        COMPLETED = "completed", "Completed"
        CANCELLED = "cancelled", "Cancelled"
        ERROR = "error", "Error"
        REJECTED = "rejected", "Rejected"
        VERIFIED = "verified", "Verified"
        VERIFICATION_FAILED = "verification_failed", "Verification failed"
        VIEWED = "viewed", "Viewed"
        SAVED = "saved", "Saved"

    created_at = models.DateTimeField(default=timezone.now, editable=False, db_index=True)
    event_type = models.CharField(max_length=16, choices=EventType.choices, db_index=True)
    outcome = models.CharField(max_length=24, choices=Outcome.choices, db_index=True)
    actor_user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.PROTECT, related_name="+")
    actor_client = models.ForeignKey(APIClient, null=True, blank=True, on_delete=models.PROTECT,
                                     related_name="+")
    actor = models.CharField(max_length=150, blank=True, help_text="Username or client name when recorded.")
    source = models.CharField(max_length=8, blank=True, help_text="web, cli or api")
    request_id = models.UUIDField(null=True, blank=True, db_index=True)
    input_sha256 = models.CharField(max_length=64, blank=True)
    input_chars = models.PositiveIntegerField(null=True, blank=True)
    engine = models.CharField(max_length=32, blank=True, db_index=True)
    model_name = models.CharField(max_length=200, blank=True)
    precision = models.CharField(max_length=32, blank=True, db_index=True)
    prompt_version = models.CharField(max_length=32, blank=True)
    queue_wait_ms = models.FloatField(null=True, blank=True, help_text="received → engine admitted")
    ttft_ms = models.FloatField(null=True, blank=True, help_text="received → first token")
    total_ms = models.FloatField(null=True, blank=True, help_text="received → last token")
    rerun_queue_wait_ms = models.FloatField(null=True, blank=True)
    rerun_ms = models.FloatField(null=True, blank=True)
    tokens_in = models.PositiveIntegerField(null=True, blank=True)
    tokens_out = models.PositiveIntegerField(null=True, blank=True)
    confidence = models.FloatField(null=True, blank=True)
    self_check = models.FloatField(null=True, blank=True, help_text="The model's own check: P(yes).")
    error_class = models.CharField(max_length=120, blank=True)
    text_sha256 = models.CharField(
        max_length=64, blank=True, help_text="handout_edit: SHA-256 of the edited handout text (never the text).")
    # Safety check outcome without clinical text: counts of missing items by kind.
    safety_passed = models.BooleanField(null=True, blank=True)
    safety_missing_counts = models.JSONField(
        default=dict, blank=True, help_text='Missing items by kind, e.g. {"dose": 1}; no clinical text.')
    faithfulness_passed = models.BooleanField(null=True, blank=True)
    faithfulness_flag_counts = models.JSONField(
        default=dict, blank=True, help_text='Faithfulness flags by kind, e.g. {"body_site": 1}; no clinical text.')
    rerun_reason = models.CharField(max_length=64, blank=True)
    rerun_candidate = models.CharField(max_length=32, blank=True,
                                       help_text="verification: the re-run candidate kept (no clinical text).")
    rerun_candidates = models.JSONField(
        default=list, blank=True, help_text="verification: the candidates tried, checks and figures only "
                                            "(Rerun.candidates; no clinical text).")

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        # The guarded manager is also the one Django uses internally
        # (``_base_manager``), so no ORM path updates or deletes a record.
        base_manager_name = "objects"

    def __str__(self) -> str:
        return f"{self.get_event_type_display()} {self.outcome} {self.request_id or ''}"

    def save(self, *args, **kwargs) -> None:
        if self.pk is not None:
            raise AppendOnlyError("audit events cannot be updated")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError("audit events cannot be deleted")


class TranslationEditQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise AppendOnlyError("handout edits cannot be updated")

    def delete(self):
        raise AppendOnlyError("handout edits cannot be deleted")


class TranslationEdit(models.Model):
    """One edit of a translation's patient handout by its clinician, stored
    beside the model's version (which is never changed).

    Append-only, like :class:`AuditEvent`: each save of the handout adds a
    row; the newest is the handout's current text. ``text_sha256`` is the
    SHA-256 of ``text`` (UTF-8), also written to the ``handout_edit`` audit
    event, so the audit log identifies the text without holding it.
    ``model_text_sha256`` identifies the model's version shown when the
    edit was made (the fast text, or the full-precision one once verified).
    """

    translation = models.ForeignKey(Translation, on_delete=models.PROTECT, related_name="edits")
    editor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(default=timezone.now, editable=False, db_index=True)
    text = models.TextField()
    text_sha256 = models.CharField(max_length=64)
    model_text_sha256 = models.CharField(max_length=64, blank=True)

    objects = TranslationEditQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        base_manager_name = "objects"  # as AuditEvent's

    def __str__(self) -> str:
        return f"Edit of {self.translation.request_id} by {self.editor} at {self.created_at:%Y-%m-%d %H:%M}"

    def save(self, *args, **kwargs) -> None:
        if self.pk is not None:
            raise AppendOnlyError("handout edits cannot be updated")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError("handout edits cannot be deleted")

"""Database models of the clinical translation service."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone
from rest_framework_api_key.models import AbstractAPIKey

# The reading levels and languages a translation may ask for (field choices and defaults).
from inference.prompts import DEFAULT_LANGUAGE, DEFAULT_READING_LEVEL, LANGUAGES, READING_LEVELS


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
                                help_text='Medical terms of the input from the vetted vocabularies (clinical.quality.glossary): '
                                          '[{"term", "definition", "source", "source_name"}].')
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
    ``clinical.rerun.tasks.translation_verify`` on the ``rerun`` queue. At most one
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
                  '"ms", "fkgl", "prompt_version"}] or [{"name", "skipped"}]; a note re-run sentence by '
                  'sentence adds each sentence\'s {"sentence", "kept", "self_check", "reason", "answer"}.')
    engine_precision = models.CharField(
        max_length=32, blank=True,
        help_text="The worker engine's own precision label (e.g. fp32, q4_k_m); precision stays the lookup key.")
    change_note = models.TextField(
        blank=True, help_text="Why the text changed, in plain words, as the clinician is told "
                              "(clinical.rerun.change_note.rerun_change_note).")

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
        KEPT = "kept", "Kept as the model wrote it"

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
    handout_change = models.JSONField(
        default=dict, blank=True,
        help_text='handout_edit: what the clinician did, {"action": "edit" | "as_written" | "keep", '
                  '"sentences": [numbers from 1]}; no clinical text.')
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


class AccountEventQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise AppendOnlyError("account events cannot be updated")

    def delete(self):
        raise AppendOnlyError("account events cannot be deleted")


class AccountEvent(models.Model):
    """Append-only record of a change to who may do what: a user's groups
    and staff, superuser and active flags, and an API client's name, scopes,
    rate, expiry and revocation, each with its value before and after.

    Written by the signal receivers in :mod:`clinical.audit` whatever made
    the change (the admin, a shell, a migration). Holds no foreign key, so
    deleting a user or client never touches a row: the actor and the
    subject are kept by id and name. An API client is identified by its
    prefix, never by its primary key, which carries the key's hash.
    Append-only like :class:`AuditEvent` (model layer, and a trigger in the
    database).
    """

    class Action(models.TextChoices):
        CREATED = "created", "Created"
        CHANGED = "changed", "Changed"
        DELETED = "deleted", "Deleted"

    class SubjectKind(models.TextChoices):
        USER = "user", "User account"
        API_CLIENT = "api_client", "API client"

    created_at = models.DateTimeField(default=timezone.now, editable=False, db_index=True)
    action = models.CharField(max_length=8, choices=Action.choices)
    subject_kind = models.CharField(max_length=12, choices=SubjectKind.choices, db_index=True)
    subject_id = models.CharField(max_length=64, db_index=True,
                                  help_text="The user's id, or the API client's prefix.")
    subject_label = models.CharField(max_length=150, blank=True, help_text="Username or client name.")
    actor_user_id = models.PositiveIntegerField(null=True, blank=True,
                                                help_text="Id of the user who made the change, if known.")
    actor = models.CharField(max_length=150, blank=True,
                             help_text="Username of who made the change; empty outside a request.")
    changes = models.JSONField(default=dict, blank=True,
                               help_text='{"field": [before, after]}; groups as sorted lists of names.')

    objects = AccountEventQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        base_manager_name = "objects"  # as AuditEvent's

    def __str__(self) -> str:
        return f"{self.subject_kind} {self.subject_label or self.subject_id} {self.action}"

    def save(self, *args, **kwargs) -> None:
        if self.pk is not None:
            raise AppendOnlyError("account events cannot be updated")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError("account events cannot be deleted")

"""Audit writes: one append-only :class:`AuditEvent` per request, written in
the same transaction as the change it records.

No clinical text is stored: inputs are identified by SHA-256 and length.
"""

from __future__ import annotations

import hashlib
import uuid

from django.db import transaction

from clinical.models import AuditEvent, Rerun, Translation, TranslationEdit


def text_fingerprint(text: object) -> tuple[str, int | None]:
    """``(sha256 hex of the UTF-8 text, length in characters)``; for a value
    that is not a string, the fingerprint of its ``repr`` and no length."""
    if isinstance(text, str):
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(), len(text)
    return hashlib.sha256(repr(text).encode()).hexdigest(), None


def _actor(user, source: str, api_client=None) -> tuple[object, object, str]:
    """``(user or None, API client or None, actor label)``."""
    if user is not None and getattr(user, "is_authenticated", False):
        return user, None, user.get_username()
    if api_client is not None:
        return None, api_client, f"api:{api_client.name}"
    return None, None, source


def audit_translation(*, translation: Translation) -> AuditEvent:
    """Record a translation's final state; call inside the transaction that
    finalises it."""
    sha, chars = text_fingerprint(translation.input_text)
    user, client, actor = _actor(translation.user, translation.source, translation.api_client)
    return AuditEvent.objects.create(
        event_type=AuditEvent.EventType.TRANSLATION, outcome=translation.status,
        actor_user=user, actor_client=client, actor=actor, source=translation.source,
        request_id=translation.request_id, input_sha256=sha, input_chars=chars,
        engine=translation.engine, model_name=translation.model_name,
        precision=translation.precision, prompt_version=translation.prompt_version,
        queue_wait_ms=translation.queue_wait_ms, ttft_ms=translation.ttft_ms,
        total_ms=translation.total_ms, tokens_in=translation.tokens_in,
        tokens_out=translation.tokens_out, confidence=translation.confidence,
        self_check=translation.self_check, error_class=translation.error_class,
        safety_passed=translation.safety_passed, safety_missing_counts=_kind_counts(translation.safety_missing),
        faithfulness_passed=translation.faithfulness_passed,
        faithfulness_flag_counts=_kind_counts(translation.faithfulness_flags),
        rerun_reason=translation.rerun_reason,
    )


def _kind_counts(missing: list[dict] | None) -> dict[str, int]:
    """Safety items missing, or faithfulness flags, counted by kind: the
    audit log keeps the outcome of a check but none of its (clinical) text."""
    counts: dict[str, int] = {}
    for item in missing or ():
        counts[item["kind"]] = counts.get(item["kind"], 0) + 1
    return counts


@transaction.atomic
def audit_refusal(*, user, source: str, text: object, outcome: str, error_class: str,
                  engine_info=None, api_client=None) -> AuditEvent:
    """Record a request that was refused before a translation existed:
    ``outcome`` ``rejected`` (bad input, busy) or ``error`` (engine
    unavailable)."""
    sha, chars = text_fingerprint(text)
    actor_user, client, actor = _actor(user, source, api_client)
    return AuditEvent.objects.create(
        event_type=AuditEvent.EventType.TRANSLATION, outcome=outcome,
        actor_user=actor_user, actor_client=client, actor=actor, source=source, request_id=uuid.uuid4(),
        input_sha256=sha, input_chars=chars, error_class=error_class[:120],
        engine=engine_info.engine if engine_info else "",
        model_name=engine_info.model if engine_info else "",
        precision=engine_info.precision if engine_info else "",
    )


def audit_verification(*, rerun: Rerun) -> AuditEvent:
    """Record a re-run's outcome; call inside the transaction that stores it.
    The candidate kept and the candidates tried go in by name with their
    checks and figures (``Rerun.candidates``), never their text."""
    translation = rerun.translation
    user, client, actor = _actor(translation.user, translation.source, translation.api_client)
    return AuditEvent.objects.create(
        event_type=AuditEvent.EventType.VERIFICATION,
        outcome=(AuditEvent.Outcome.VERIFIED if rerun.status == Rerun.Status.COMPLETED
                 else AuditEvent.Outcome.VERIFICATION_FAILED),
        actor_user=user, actor_client=client, actor=actor, source=translation.source,
        request_id=translation.request_id,
        input_sha256=text_fingerprint(translation.input_text)[0],
        input_chars=len(translation.input_text), engine=rerun.engine,
        model_name=rerun.model_name, precision=rerun.precision_label,
        prompt_version=translation.prompt_version,
        rerun_queue_wait_ms=rerun.queue_wait_ms, rerun_ms=rerun.duration_ms,
        tokens_out=rerun.tokens_out, confidence=rerun.confidence, self_check=rerun.self_check,
        error_class=rerun.error_class,
        safety_passed=rerun.safety_passed, safety_missing_counts=_kind_counts(rerun.safety_missing),
        faithfulness_passed=rerun.faithfulness_passed,
        faithfulness_flag_counts=_kind_counts(rerun.faithfulness_flags),
        rerun_reason=translation.rerun_reason,
        rerun_candidate=rerun.candidate, rerun_candidates=list(rerun.candidates or []),
    )


@transaction.atomic
def audit_text_access(*, user, translation: Translation) -> AuditEvent:
    """Record that ``user`` (IT, in the admin) viewed a translation's text."""
    return AuditEvent.objects.create(
        event_type=AuditEvent.EventType.TEXT_ACCESS, outcome=AuditEvent.Outcome.VIEWED,
        actor_user=user, actor=user.get_username(), source="admin",
        request_id=translation.request_id,
        input_sha256=text_fingerprint(translation.input_text)[0],
        input_chars=len(translation.input_text),
    )


def audit_handout_edit(*, edit: TranslationEdit) -> AuditEvent:
    """Record that a clinician saved an edited handout; call inside the
    transaction that stores the edit. ``text_sha256`` identifies the edited
    text (never stored here); ``input_sha256`` the translation's input."""
    translation = edit.translation
    sha, chars = text_fingerprint(translation.input_text)
    return AuditEvent.objects.create(
        event_type=AuditEvent.EventType.HANDOUT_EDIT, outcome=AuditEvent.Outcome.SAVED,
        actor_user=edit.editor, actor=edit.editor.get_username(), source=Translation.Source.WEB,
        request_id=translation.request_id, input_sha256=sha, input_chars=chars,
        text_sha256=edit.text_sha256,
    )


#: Tables whose rows are never changed once written.
APPEND_ONLY_TABLES = ("clinical_auditevent", "clinical_translationedit")


def append_only_triggers_ensure(*, connection) -> int:
    """On SQLite, (re)create the triggers that refuse UPDATE of the
    append-only tables, and an INSERT whose id is already there (migration
    0012; PostgreSQL has its own since 0004 and 0009). Run after every
    ``migrate``: SQLite alters a table by copying it into a new one, which
    drops its triggers.

    ``INSERT OR REPLACE`` (``REPLACE INTO``) rewrites a row by deleting it
    and inserting the new one: no UPDATE trigger fires, and the delete fires
    no trigger while ``recursive_triggers`` is off, so the INSERT trigger is
    the one that refuses it.

    Returns:
        The number of triggers created (0 on other databases).
    """
    if connection.vendor != "sqlite":
        return 0
    created = 0
    with connection.cursor() as cursor:
        tables = {row[0] for row in cursor.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for table in APPEND_ONLY_TABLES:
            if table in tables:
                cursor.execute(
                    f"CREATE TRIGGER IF NOT EXISTS {table}_append_only_update BEFORE UPDATE ON {table} "
                    f"BEGIN SELECT RAISE(ABORT, '{table} is append-only (UPDATE refused)'); END;")
                cursor.execute(
                    f"CREATE TRIGGER IF NOT EXISTS {table}_append_only_replace BEFORE INSERT ON {table} "
                    f"WHEN EXISTS (SELECT 1 FROM {table} WHERE id = NEW.id) "
                    f"BEGIN SELECT RAISE(ABORT, '{table} is append-only (REPLACE refused)'); END;")
                created += 2
    return created

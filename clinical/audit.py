"""Audit writes: one append-only :class:`AuditEvent` per request, written in
the same transaction as the change it records.

No clinical text is stored: inputs are identified by SHA-256 and length.
"""

from __future__ import annotations

import hashlib
import uuid
from contextvars import ContextVar

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_save

from clinical.models import AccountEvent, APIClient, AuditEvent, Rerun, Translation, TranslationEdit


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


def audit_handout_edit(*, edit: TranslationEdit, change: dict | None = None) -> AuditEvent:
    """Record that a clinician saved an edited handout; call inside the
    transaction that stores the edit. ``text_sha256`` identifies the edited
    text (never stored here); ``input_sha256`` the translation's input;
    ``change`` what the clinician did (``{"action", "sentences"}``, no
    text: :mod:`clinical.translation.handouts`)."""
    translation = edit.translation
    sha, chars = text_fingerprint(translation.input_text)
    return AuditEvent.objects.create(
        event_type=AuditEvent.EventType.HANDOUT_EDIT, outcome=AuditEvent.Outcome.SAVED,
        actor_user=edit.editor, actor=edit.editor.get_username(), source=Translation.Source.WEB,
        request_id=translation.request_id, input_sha256=sha, input_chars=chars,
        text_sha256=edit.text_sha256, handout_change=change or {},
    )


def audit_handout_sentence_kept(*, translation: Translation, editor, change: dict) -> AuditEvent:
    """Record that a clinician keeps a sentence of the handout as the model
    wrote it (``change``: ``{"action": "keep", "sentences": [n]}``, no
    text); the handout is unchanged."""
    sha, chars = text_fingerprint(translation.input_text)
    return AuditEvent.objects.create(
        event_type=AuditEvent.EventType.HANDOUT_EDIT, outcome=AuditEvent.Outcome.KEPT,
        actor_user=editor, actor=editor.get_username(), source=Translation.Source.WEB,
        request_id=translation.request_id, input_sha256=sha, input_chars=chars, handout_change=change,
    )


#: Tables whose rows are never changed once written.
APPEND_ONLY_TABLES = ("clinical_auditevent", "clinical_translationedit", "clinical_accountevent")


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


# -- account events: who may do what -------------------------------------------

#: A user's flags recorded with their values before and after.
USER_ACCESS_FIELDS = ("is_active", "is_staff", "is_superuser")
#: An API client's fields recorded with their values before and after (never
#: its id or hashed key, which carry the key's hash).
API_CLIENT_FIELDS = ("name", "revoked", "scope_translate", "scope_read", "throttle_rate", "expiry_date")


#: The request being served (set by clinical.web.middleware.ChangeActorMiddleware
#: for the request's duration): its signed-in user is the actor of account changes.
change_request: ContextVar = ContextVar("clinical_change_request", default=None)


def _change_actor() -> tuple[int | None, str]:
    """``(user id, username)`` of the signed-in user whose request is making
    the change, else ``(None, "")`` (a shell, a migration)."""
    request = change_request.get()
    actor = getattr(request, "user", None)
    if actor is None or not getattr(actor, "is_authenticated", False):
        return None, ""
    return actor.pk, actor.get_username()


def _jsonable(value: object) -> object:
    return value.isoformat() if hasattr(value, "isoformat") else value


def audit_account_change(*, subject, action: str, changes: dict[str, list]) -> AccountEvent:
    """Record a change to who may do what (:class:`AccountEvent`).

    Args:
        subject: the user or :class:`APIClient` changed.
        action: ``created``, ``changed`` or ``deleted``.
        changes: ``{field: [before, after]}``.
    """
    actor_id, actor = _change_actor()
    if isinstance(subject, APIClient):
        kind, subject_id, label = AccountEvent.SubjectKind.API_CLIENT, subject.prefix, subject.name
    else:
        kind, subject_id, label = AccountEvent.SubjectKind.USER, str(subject.pk), subject.get_username()
    return AccountEvent.objects.create(
        action=action, subject_kind=kind, subject_id=subject_id, subject_label=label,
        actor_user_id=actor_id, actor=actor,
        changes={field: [_jsonable(before), _jsonable(after)] for field, (before, after) in changes.items()})


def _account_fields(instance) -> tuple[str, ...]:
    """The fields recorded with before and after for ``instance``."""
    return API_CLIENT_FIELDS if isinstance(instance, APIClient) else USER_ACCESS_FIELDS


def account_before_save(sender, instance, raw=False, **kwargs) -> None:
    """pre_save of a user or API client: keep the stored values of its
    recorded fields on the instance (fixtures, ``raw``, are not recorded)."""
    if raw:
        return
    instance._account_before = (sender._base_manager.filter(pk=instance.pk).values(*_account_fields(instance)).first()
                                if instance.pk is not None else None)


def account_after_save(sender, instance, created, raw=False, **kwargs) -> None:
    """post_save of a user or API client: record the fields that changed
    (all of them on creation)."""
    if raw:
        return
    fields = _account_fields(instance)
    before = getattr(instance, "_account_before", None)
    instance._account_before = None
    if created or before is None:
        audit_account_change(subject=instance, action=AccountEvent.Action.CREATED,
                             changes={field: [None, getattr(instance, field)] for field in fields})
        return
    changes = {field: [before[field], getattr(instance, field)] for field in fields
               if before[field] != getattr(instance, field)}
    if changes:
        audit_account_change(subject=instance, action=AccountEvent.Action.CHANGED, changes=changes)


def account_after_delete(sender, instance, **kwargs) -> None:
    audit_account_change(subject=instance, action=AccountEvent.Action.DELETED,
                         changes={field: [getattr(instance, field), None] for field in _account_fields(instance)})


def _group_names(user) -> list[str]:
    return sorted(user.groups.values_list("name", flat=True))


def user_groups_changed(sender, instance, action, reverse, model, pk_set, **kwargs) -> None:
    """m2m_changed on ``User.groups``, from either side (``user.groups.add``
    or ``group.user_set.add``): one ``changed`` event per user whose groups
    changed, ``{"groups": [names before, names after]}``."""
    if action.startswith("pre_"):
        if reverse:
            users = (list(instance.user_set.all()) if action == "pre_clear"
                     else list(get_user_model()._base_manager.filter(pk__in=pk_set or ())))
        else:
            users = [instance]
        instance._groups_before = [(user, _group_names(user)) for user in users]
        return
    for user, before in getattr(instance, "_groups_before", ()):
        after = _group_names(user)
        if after != before:
            audit_account_change(subject=user, action=AccountEvent.Action.CHANGED, changes={"groups": [before, after]})
    instance._groups_before = ()


def account_audit_connect() -> None:
    """Connect the receivers that write :class:`AccountEvent` rows
    (idempotent): a user's flags and groups, and API clients."""
    user = get_user_model()
    for signal, receiver, sender in (
            (pre_save, account_before_save, user), (post_save, account_after_save, user),
            (post_delete, account_after_delete, user), (m2m_changed, user_groups_changed, user.groups.through),
            (pre_save, account_before_save, APIClient), (post_save, account_after_save, APIClient),
            (post_delete, account_after_delete, APIClient)):
        signal.connect(receiver, sender=sender, dispatch_uid=f"clinical.audit.{receiver.__name__}.{sender.__name__}")

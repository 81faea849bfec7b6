"""The admin that hospital IT runs the service from.

Translations are listed without their text; opening one shows the clinical
text and records an audit event. Audit events are read-only, filterable and
exportable as CSV (django-import-export). The dashboard lives at
``/admin/dashboard/`` (clinical/web/admin_views.py).
"""

from __future__ import annotations

import csv
import io

from auditlog.registry import auditlog
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied
from django.db.models.constants import LOOKUP_SEP
from import_export import resources
from import_export.admin import ExportActionMixin
from import_export.formats import base_formats
from rest_framework_api_key.admin import APIKeyModelAdmin

from clinical import audit
from clinical.models import AccountEvent, APIClient, AuditEvent, Rerun, Translation, TranslationEdit
from clinical.roles import CLINICIAN_GROUP

# A password change is recorded (masked), never its hash; group changes too.
auditlog.register(get_user_model(), exclude_fields=["last_login"], mask_fields=["password"],
                  m2m_fields={"groups"})
auditlog.register(Group)
# API clients are not in auditlog's log: it keys an entry by the primary key,
# which for djangorestframework-api-key is "<prefix>.<hashed key>". Their
# changes are AccountEvent rows keyed by prefix, as are every change of a
# user's groups and flags (append-only, with before and after).
audit.account_audit_connect()

admin.site.site_header = "Plain-language diagnosis: administration"
admin.site.index_template = "admin/clinical_index.html"


#: Fields that hold clinical text (a diagnosis, an output, a handout, a
#: re-run's text or its checks' quoted spans), on any model.
CLINICAL_TEXT_FIELDS = frozenset({
    "input_text", "output_text", "text", "change_note", "sentence_checks", "safety_missing",
    "faithfulness_flags", "glossary", "candidates", "rerun_candidates",
})


def lookup_names_clinical_text(lookup: str) -> bool:
    """Whether a query-string lookup (``input_text__startswith``,
    ``reruns__output_text__icontains``, ``translations__edits__text``)
    names a field holding clinical text anywhere along its path."""
    return any(part in CLINICAL_TEXT_FIELDS for part in lookup.split(LOOKUP_SEP))


class ClinicalTextLookupGuard:
    """Refuses lookups on clinical text in a changelist's query string.

    A list that answers "1 result" or "0 results" to
    ``?input_text__startswith=f`` reveals the text one character at a time
    without opening (and auditing) the change page. Django answers a refused
    lookup with 400 (``DisallowedModelAdminLookup``)."""

    def lookup_allowed(self, lookup, value, request=None) -> bool:
        if lookup_names_clinical_text(lookup):
            return False
        return super().lookup_allowed(lookup, value, request)


class ReadOnlyAdmin(ClinicalTextLookupGuard, admin.ModelAdmin):
    """Nothing can be added, changed or deleted here; no lookup on clinical text."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


admin.site.unregister(get_user_model())


@admin.register(get_user_model())
class AccountAdmin(ClinicalTextLookupGuard, UserAdmin):
    """Accounts. IT (staff without superuser) manages clinicians' accounts:
    creates them, puts them in the Clinician group, deactivates them and
    requires a new password (the action below). Only a superuser grants
    staff, superuser, other groups or permissions, changes a staff account
    (IT's own included) or sets another user's password. Every change is in
    django-auditlog's log (the password masked)."""

    actions = ["password_reset_require"]

    def _it(self, request) -> bool:
        return not request.user.is_superuser

    def has_change_permission(self, request, obj=None) -> bool:
        if not super().has_change_permission(request, obj):
            return False
        return obj is None or not self._it(request) or not (obj.is_staff or obj.is_superuser)

    def has_delete_permission(self, request, obj=None) -> bool:
        return request.user.is_superuser and super().has_delete_permission(request, obj)

    def get_readonly_fields(self, request, obj=None):
        fields = tuple(super().get_readonly_fields(request, obj))
        if self._it(request):
            fields += ("is_staff", "is_superuser", "user_permissions", "last_login", "date_joined")
        return fields

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        if db_field.name == "groups" and self._it(request):
            kwargs["queryset"] = Group.objects.filter(name=CLINICIAN_GROUP)
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def user_change_password(self, request, id, form_url=""):
        """Setting another user's password is a superuser's act: IT could
        otherwise log in as a clinician."""
        if self._it(request) and str(request.user.pk) != str(id):
            raise PermissionDenied
        return super().user_change_password(request, id, form_url)

    @admin.action(description="Require a new password (the current one stops working)",
                  permissions=["change"])
    def password_reset_require(self, request, queryset):
        changed = 0
        for user in queryset:
            if self._it(request) and (user.is_staff or user.is_superuser):
                continue
            user.set_unusable_password()
            user.save(update_fields=["password"])
            changed += 1
        self.message_user(request, f"{changed} account(s) must now be given a new password by a superuser.",
                          messages.SUCCESS)


@admin.register(APIClient)
class APIClientAdmin(ClinicalTextLookupGuard, APIKeyModelAdmin):
    """EHR clients: the token is shown once, on creation, and stored hashed."""

    list_display = ("name", "prefix", "scope_translate", "scope_read", "throttle_rate",
                    "expiry_date", "revoked", "created_at")
    list_filter = ("revoked", "scope_translate", "scope_read")


class RerunInline(admin.TabularInline):
    model = Rerun
    extra = 0
    can_delete = False
    fields = ("precision", "engine_precision", "status", "attempts", "dispatched_at", "queue_wait_ms", "duration_ms",
              "confidence", "self_check", "tokens_out")
    readonly_fields = fields

    def has_add_permission(self, request, obj=None) -> bool:
        return False


class TranslationEditInline(admin.TabularInline):
    """The clinician's handout edits (append-only), beside the model's text."""

    model = TranslationEdit
    extra = 0
    can_delete = False
    fields = ("created_at", "editor", "text_sha256", "text")
    readonly_fields = fields

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Translation)
class TranslationAdmin(ReadOnlyAdmin):
    """Translations; the detail page (with the clinical text) is audited."""

    list_display = ("created_at", "user", "source", "status", "verification", "engine", "precision",
                    "ttft_ms", "total_ms", "tokens_out", "confidence", "self_check")
    list_filter = ("status", "verification", "engine", "precision", "source")
    date_hierarchy = "created_at"
    search_fields = ("=request_id", "user__username")
    readonly_fields = [f.name for f in Translation._meta.fields]
    inlines = [RerunInline, TranslationEditInline]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        response = super().change_view(request, object_id, form_url, extra_context)
        if response.status_code == 200:
            translation = self.get_object(request, object_id)
            if translation is not None:
                audit.audit_text_access(user=request.user, translation=translation)
        return response


class AuditEventResource(resources.ModelResource):
    class Meta:
        model = AuditEvent
        fields = ("id", "created_at", "event_type", "outcome", "actor", "source", "request_id",
                  "input_sha256", "input_chars", "engine", "model_name", "precision", "prompt_version",
                  "queue_wait_ms", "ttft_ms", "total_ms", "rerun_queue_wait_ms", "rerun_ms",
                  "tokens_in", "tokens_out", "confidence", "self_check", "error_class", "text_sha256")
        export_order = fields


#: First characters that make a spreadsheet read a cell as a formula (OWASP
#: CSV injection: = + - @, tab and carriage return).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> str:
    """A cell as a spreadsheet shows it but never runs it: ``'`` before a
    value starting with one of :data:`FORMULA_STARTS`; ``None`` empty."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


class SpreadsheetSafeCSV(base_formats.CSV):
    """CSV as OWASP's CSV-injection guidance asks: every cell quoted, a cell
    that would start a formula prefixed with ``'`` (:func:`csv_cell`), the
    rest of the value kept."""

    def export_data(self, dataset, **kwargs) -> str:
        out = io.StringIO()
        writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\r\n")
        writer.writerow([csv_cell(header) for header in dataset.headers or ()])
        writer.writerows([csv_cell(cell) for cell in row] for row in dataset)
        return out.getvalue()


@admin.register(AuditEvent)
class AuditEventAdmin(ExportActionMixin, ReadOnlyAdmin):
    """Append-only audit log; export as CSV from the list page."""

    resource_classes = [AuditEventResource]
    # No spreadsheet format (xlsx, xls, ods, tsv) would carry the formulas
    # escaped: CSV as above, or JSON, which no spreadsheet runs.
    export_formats = [SpreadsheetSafeCSV, base_formats.JSON]
    list_display = ("created_at", "event_type", "outcome", "actor", "source", "engine", "precision",
                    "ttft_ms", "total_ms", "tokens_out", "confidence", "error_class")
    list_filter = ("event_type", "outcome", "source", "engine", "precision",
                   ("actor_user", admin.RelatedOnlyFieldListFilter),
                   ("actor_client", admin.RelatedOnlyFieldListFilter), "created_at")
    date_hierarchy = "created_at"
    search_fields = ("=request_id", "actor", "=input_sha256", "=text_sha256")
    readonly_fields = [f.name for f in AuditEvent._meta.fields]


@admin.register(AccountEvent)
class AccountEventAdmin(ReadOnlyAdmin):
    """Append-only log of changes to who may do what: users' groups and
    flags, API clients (by prefix), each with before and after."""

    list_display = ("created_at", "action", "subject_kind", "subject_label", "subject_id", "actor", "changes")
    list_filter = ("action", "subject_kind", "created_at")
    date_hierarchy = "created_at"
    search_fields = ("=subject_id", "subject_label", "actor")
    readonly_fields = [f.name for f in AccountEvent._meta.fields]

"""The admin that hospital IT runs the service from.

Translations are listed without their text; opening one shows the clinical
text and records an audit event. Audit events are read-only, filterable and
exportable as CSV (django-import-export). The dashboard lives at
``/admin/dashboard/`` (clinical/web/admin_views.py).
"""

from __future__ import annotations

from auditlog.registry import auditlog
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from import_export import resources
from import_export.admin import ExportActionMixin
from rest_framework_api_key.admin import APIKeyModelAdmin

from clinical import audit
from clinical.models import APIClient, AuditEvent, Rerun, Translation, TranslationEdit

auditlog.register(get_user_model(), exclude_fields=["password", "last_login"])
auditlog.register(Group)
auditlog.register(APIClient, exclude_fields=["hashed_key"])

admin.site.site_header = "Plain-language diagnosis: administration"
admin.site.index_template = "admin/clinical_index.html"


class ReadOnlyAdmin(admin.ModelAdmin):
    """Nothing can be added, changed or deleted here."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(APIClient)
class APIClientAdmin(APIKeyModelAdmin):
    """EHR clients: the token is shown once, on creation, and stored hashed."""

    list_display = ("name", "prefix", "scope_translate", "scope_read", "throttle_rate",
                    "expiry_date", "revoked", "created_at")
    list_filter = ("revoked", "scope_translate", "scope_read")


class RerunInline(admin.TabularInline):
    model = Rerun
    extra = 0
    can_delete = False
    fields = ("precision", "status", "attempts", "dispatched_at", "queue_wait_ms", "duration_ms",
              "confidence", "tokens_out")
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
                    "ttft_ms", "total_ms", "tokens_out", "confidence")
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
                  "tokens_in", "tokens_out", "confidence", "error_class", "text_sha256")
        export_order = fields


@admin.register(AuditEvent)
class AuditEventAdmin(ExportActionMixin, ReadOnlyAdmin):
    """Append-only audit log; export as CSV from the list page."""

    resource_classes = [AuditEventResource]
    list_display = ("created_at", "event_type", "outcome", "actor", "source", "engine", "precision",
                    "ttft_ms", "total_ms", "tokens_out", "confidence", "error_class")
    list_filter = ("event_type", "outcome", "source", "engine", "precision",
                   ("actor_user", admin.RelatedOnlyFieldListFilter),
                   ("actor_client", admin.RelatedOnlyFieldListFilter), "created_at")
    date_hierarchy = "created_at"
    search_fields = ("=request_id", "actor", "=input_sha256", "=text_sha256")
    readonly_fields = [f.name for f in AuditEvent._meta.fields]

from django.contrib import admin

from clinical.models import Translation


@admin.register(Translation)
class TranslationAdmin(admin.ModelAdmin):
    """Read-only view of translations and their figures."""

    list_display = ("created_at", "user", "source", "status", "engine", "precision",
                    "ttft_ms", "total_ms", "tokens_out", "confidence")
    list_filter = ("status", "engine", "precision", "source")
    date_hierarchy = "created_at"
    readonly_fields = [f.name for f in Translation._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

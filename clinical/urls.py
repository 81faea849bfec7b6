from django.contrib import admin
from django.urls import include, path

from clinical.web import admin_views, health, views

urlpatterns = [
    path("", views.translate_page, name="translate"),
    path("translations/", views.translation_history, name="translation-history"),
    path("translations/<uuid:request_id>/", views.translation_detail, name="translation-detail"),
    path("translations/<uuid:request_id>/handout/", views.translation_handout, name="translation-handout"),
    path("api/", include("clinical.api.urls")),
    path("readyz", health.readyz, name="readiness"),
    path("livez", health.livez, name="liveness"),
    path("metrics", health.metrics_view, name="metrics"),
    path("accounts/extend/", views.session_extend, name="session-extend"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/dashboard/", admin.site.admin_view(admin_views.dashboard), name="admin-dashboard"),
    path("admin/dashboard/<str:bucket>.svg", admin.site.admin_view(admin_views.dashboard_plot),
         name="admin-dashboard-plot"),
    path("admin/", admin.site.urls),
]

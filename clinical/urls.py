from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from clinical.web import admin_views, health, views

urlpatterns = [
    path("", views.translate_page, name="translate"),
    path("translations/", views.translation_history, name="translation-history"),
    path("translations/<uuid:request_id>/", views.translation_detail, name="translation-detail"),
    path("translations/<uuid:request_id>/handout/", views.translation_handout, name="translation-handout"),
    path("translations/<uuid:request_id>/sentences/", views.translation_sentences_json,
         name="translation-sentences"),
    path("api/", include("clinical.api.urls")),
    path("readyz", health.readyz, name="readiness"),
    path("livez", health.livez, name="liveness"),
    path("metrics", health.metrics_view, name="metrics"),
    path("accounts/extend/", views.session_extend, name="session-extend"),
    # Log in and out, and change one's own password; no reset by mail (no
    # mail backend: IT requires a new password from the admin instead).
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/password_change/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path("accounts/password_change/done/", auth_views.PasswordChangeDoneView.as_view(),
         name="password_change_done"),
    path("admin/dashboard/", admin.site.admin_view(admin_views.dashboard), name="admin-dashboard"),
    path("admin/dashboard/<str:bucket>.svg", admin.site.admin_view(admin_views.dashboard_plot),
         name="admin-dashboard-plot"),
    path("admin/", admin.site.urls),
]

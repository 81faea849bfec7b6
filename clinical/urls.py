from django.contrib import admin
from django.urls import include, path

from clinical import views

urlpatterns = [
    path("", views.translate_page, name="translate"),
    path("translations/<uuid:request_id>/", views.translation_detail, name="translation-detail"),
    path("readyz", views.readiness, name="readiness"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/", admin.site.urls),
]

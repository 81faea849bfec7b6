from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerSplitView

from clinical.api import fhir_views, views

urlpatterns = [
    path("v1/translations/", views.TranslationCreateView.as_view(), name="api-translations"),
    # Any id reaches the view, which answers one that is not a UUID with the
    # API's JSON 404 (a <uuid:> route would leave it to Django's HTML page).
    path("v1/translations/<str:request_id>/", views.TranslationDetailView.as_view(),
         name="api-translation-detail"),
    path("fhir/Condition/$plain-language", fhir_views.PlainLanguageOperationView.as_view(),
         name="api-fhir-plain-language"),
    path("schema/", SpectacularAPIView.as_view(authentication_classes=[], permission_classes=[],
                                               throttle_classes=[]), name="api-schema"),
    # The split view serves Swagger UI's start-up script as a file, so the
    # page works under script-src 'self'; the UI itself comes from the
    # drf-spectacular-sidecar package (no CDN).
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema", authentication_classes=[],
                                                      permission_classes=[], throttle_classes=[]),
         name="api-docs"),
    path("redoc/", SpectacularRedocView.as_view(url_name="api-schema", authentication_classes=[],
                                                permission_classes=[], throttle_classes=[]),
         name="api-redoc"),
]

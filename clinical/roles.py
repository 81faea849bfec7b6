"""The two roles, as Django groups with their permissions: ``Clinician``
(translates) and ``IT`` (runs the service from the admin: reads the audit
log, translations and re-runs, manages accounts and API clients; no
clinical text is shown there unaudited).

Who may translate: active members of the ``Clinician`` group (hospital IT
puts accounts in it from the admin; :func:`user_is_clinician`). A user in
no group, IT staff and superusers are refused: the pages answer 403
(:func:`clinician_required`) and the socket is closed with 4403 after an
error frame. API clients are not users; their scopes decide
(:mod:`clinical.api.auth`).

Migrations 0004 and 0006 created them; :func:`roles_ensure` makes them so
again after every ``migrate`` and ``flush`` (a ``post_migrate`` handler,
:mod:`clinical.apps`), because ``flush`` empties every table, groups
included, and only permissions and content types are recreated by Django
itself. A test database that transactional tests flush therefore keeps its
roles whatever order the tests run in.
"""

from __future__ import annotations

from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied

CLINICIAN_GROUP = "Clinician"
IT_GROUP = "IT"
#: ``(app label, model, actions)`` granted to the IT group (0004, then
#: 0006 for API clients).
IT_PERMISSIONS = [
    ("clinical", "auditevent", ["view"]),
    ("clinical", "accountevent", ["view"]),
    ("clinical", "translation", ["view"]),
    ("clinical", "rerun", ["view"]),
    ("clinical", "apiclient", ["view", "add", "change"]),
    ("auth", "user", ["view", "add", "change"]),
    ("auth", "group", ["view"]),
    ("axes", "accessattempt", ["view"]),
    ("axes", "accessfailurelog", ["view"]),
    ("axes", "accesslog", ["view"]),
    ("auditlog", "logentry", ["view"]),
]


def roles_ensure(*, apps, using: str = "default") -> None:
    """Create the ``Clinician`` and ``IT`` groups where missing and give IT
    its permissions (:data:`IT_PERMISSIONS`); idempotent, never removes a
    permission a site added. ``apps``: the app registry to read models
    from (``post_migrate``'s, or :data:`django.apps.apps`).

    The permissions must exist already: Django's own ``post_migrate``
    handler creates each app's, and ``clinical`` is the last of
    ``INSTALLED_APPS``, so every app IT has permissions in has had its
    handler when this runs (the flush test checks IT's full set)."""
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    Group.objects.using(using).get_or_create(name=CLINICIAN_GROUP)
    it, _ = Group.objects.using(using).get_or_create(name=IT_GROUP)
    for app_label, model, actions in IT_PERMISSIONS:
        it.permissions.add(*Permission.objects.using(using).filter(
            content_type__app_label=app_label, codename__in=[f"{action}_{model}" for action in actions]))


#: What a signed-in user outside the group is told (page and socket).
NOT_A_CLINICIAN_MESSAGE = ("Only clinicians may translate or read translations. Your account is not in the "
                           "Clinician group; ask hospital IT if it should be.")


def user_is_clinician(user) -> bool:
    """True for an active, signed-in member of the Clinician group (one
    query)."""
    return bool(user is not None and user.is_authenticated and user.is_active
                and user.groups.filter(name=CLINICIAN_GROUP).exists())


def clinician_required(view):
    """View decorator: anonymous users go to the login page, signed-in
    users outside the Clinician group get 403 (templates/403.html)."""

    @login_required
    @wraps(view)
    def wrapped(request, *args, **kwargs):
        if not user_is_clinician(request.user):
            raise PermissionDenied(NOT_A_CLINICIAN_MESSAGE)
        return view(request, *args, **kwargs)

    return wrapped

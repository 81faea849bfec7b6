"""Who may translate: members of the ``Clinician`` group
(:mod:`clinical.roles`; hospital IT puts accounts in it from the admin). A
user in no group, IT staff and superusers are refused: the pages answer 403 and the
socket is closed with 4403 after an error frame. API clients are not users;
their scopes decide (:mod:`clinical.api.auth`)."""

from __future__ import annotations

from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied

from clinical.roles import CLINICIAN_GROUP

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

"""``manage.py demo_user``: create (once) and print the demo clinician login
(a member of the Clinician group, the role that may translate).

For a laptop or a demo only; refused when ``DJANGO_ENV=production``. The
password is random, made on first use and kept in ``var/demo-login.txt``
(mode 0600, outside git).
"""

from __future__ import annotations

import os
import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError

from clinical.roles import CLINICIAN_GROUP

USERNAME = "demo-clinician"


class Command(BaseCommand):
    help = "Create the demo clinician account if needed and print its login."

    def handle(self, *args, **options) -> None:
        if settings.PRODUCTION:
            raise CommandError("demo_user is disabled when DJANGO_ENV=production")
        secret_file = settings.VAR_DIR / "demo-login.txt"
        User = get_user_model()
        user = User.objects.filter(username=USERNAME).first()
        password = secret_file.read_text().strip() if secret_file.exists() else ""
        if user is None or not password or not user.check_password(password):
            password = secrets.token_urlsafe(12)
            user = user or User(username=USERNAME, first_name="Demo", last_name="Clinician")
            user.set_password(password)
            user.is_active = True
            user.save()
            secret_file.write_text(password + "\n")
            os.chmod(secret_file, 0o600)
        user.groups.add(Group.objects.get_or_create(name=CLINICIAN_GROUP)[0])
        self.stdout.write(f"username: {USERNAME}\npassword: {password}")

import secrets

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Run RetryOps on this machine: migrate, make sure an admin user exists, and serve the web app."

    def add_arguments(self, parser):
        parser.add_argument("--addrport", default="127.0.0.1:8000", help="Where to serve (default 127.0.0.1:8000).")
        parser.add_argument("--no-serve", action="store_true", help="Prepare everything, then exit.")

    def handle(self, *args, addrport, no_serve, **options):
        call_command("migrate", interactive=False, verbosity=0)
        self.stdout.write("database migrated")
        self.ensure_admin()
        if no_serve:
            return
        self.stdout.write(self.style.SUCCESS(f"admin: http://{addrport}/admin/"))
        call_command("runserver", addrport, use_reloader=False)

    def ensure_admin(self) -> None:
        User = get_user_model()
        if User.objects.filter(is_superuser=True).exists():
            self.stdout.write("an admin user exists already")
            return
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser("admin", "admin@localhost", password)
        self.stdout.write(self.style.WARNING(f"created the admin user: login admin, password {password}"))

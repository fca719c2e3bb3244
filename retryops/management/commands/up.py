import os
import secrets
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import connections

from resources import services as pool_services
from resources.models import ResourcePool
from scheduling.models import BatchConfig, RetryPolicy

DEMO_POOL = "demo-accounts"


class Command(BaseCommand):
    help = ("Run RetryOps on this machine: migrate, load the retry policies, create a demo pool and admin user, "
            "then serve the web app with an RQ worker for flows, one for the periodic jobs, and the periodic jobs' cron.")

    def add_arguments(self, parser):
        parser.add_argument("--addrport", default="127.0.0.1:8000", help="Where to serve (default 127.0.0.1:8000).")
        parser.add_argument("--no-serve", action="store_true", help="Prepare everything, then exit.")
        parser.add_argument("--no-demo", action="store_true", help="Do not create the demo pool and batch.")

    def handle(self, *args, addrport, no_serve, no_demo, **options):
        call_command("migrate", interactive=False, verbosity=0)
        self.stdout.write("database migrated")
        # Only the missing ones: a policy edited in the admin must survive a restart.
        call_command("load_retry_policies", only_missing=True, stdout=self.stdout)
        if not no_demo:
            self.ensure_demo()
        self.ensure_admin()
        if no_serve:
            return
        self.serve(addrport)

    def ensure_demo(self) -> None:
        if ResourcePool.objects.filter(name=DEMO_POOL).exists():
            self.stdout.write(f"demo pool {DEMO_POOL} exists already")
            return
        pool = pool_services.create_pool(name=DEMO_POOL, resource_noun="account", lease_seconds=120,
                                         description="Demo signup accounts; the demo batch runs flows on them.")
        pool_services.add_resources(pool=pool, resources=[
            {"key": f"user{n:02d}@demo.example", "label": f"Demo user {n}", "attributes": {"region": ["eu", "us"][n % 2]}}
            for n in range(1, 51)
        ])
        BatchConfig.objects.create(
            name="demo-signups", pool=pool, flow="demo", policy=RetryPolicy.objects.get(name="fast"),
            payload={"failure_rate": 0.3, "non_retryable_rate": 0.03, "sleep": 0.5},
            tasks_per_tick=5, retry_failed_first=True, recent_window_seconds=600,
        )
        self.stdout.write(f"created demo pool {DEMO_POOL} (50 accounts) and batch config demo-signups")

    def ensure_admin(self) -> None:
        User = get_user_model()
        admin = User.objects.filter(is_superuser=True).order_by("pk").first()
        if admin:
            self.stdout.write(f"an admin user exists already (login {admin.get_username()}; to set its password: "
                              f"manage.py changepassword {admin.get_username()})")
            return
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser("admin", "admin@localhost", password)
        self.stdout.write(self.style.WARNING(f"created the admin user: login admin, password {password}"))

    def child_processes(self, addrport: str) -> dict[str, tuple[list[str], dict[str, str]]]:
        """The command line and environment of each process `up` serves with, by name. The periodic
        jobs have a worker of their own, so a backlog of flows never delays the dispatcher or the
        batch ticks; the flow worker takes due retries before new tasks, and runs RQ's scheduler,
        which moves delayed retries onto their queue."""
        from scheduling.queueing import PERIODIC_QUEUE, WORKER_QUEUES

        manage = [sys.executable, str(settings.BASE_DIR / "manage.py")]
        worker_class = ["--worker-class", settings.RETRYOPS_WORKER_CLASS] if settings.RETRYOPS_WORKER_CLASS else []
        # The children inherit DATABASE_URL and REDIS_URL (devservices wrote them), so they use the
        # servers this process chose, embedded ones included, which live as long as it does.
        env = os.environ.copy()
        # runserver handles each request in a thread of its own, which ends with the request: a
        # persistent connection would stay open, idle, until garbage collection (dozens of them).
        web_env = {**env, "DB_CONN_MAX_AGE": "0"}
        return {
            "worker": ([*manage, "rqworker", *WORKER_QUEUES, "--with-scheduler", *worker_class], env),
            "periodic worker": ([*manage, "rqworker", PERIODIC_QUEUE, *worker_class], env),
            "periodic jobs": ([*manage, "rqcron", "scheduling.cron"], env),
            "dead letters": ([*manage, "rqcron", "compensation.cron"], env),
            "stream publisher": ([*manage, "rqcron", "audit.cron"], env),  # audit/cron.py says why its own
            "web": ([*manage, "runserver", addrport, "--noreload"], web_env),
        }

    def serve(self, addrport: str) -> None:
        connections.close_all()  # this process only waits from here on
        children = {name: subprocess.Popen(cmd, env=env) for name, (cmd, env) in self.child_processes(addrport).items()}
        self.stdout.write(self.style.SUCCESS(f"admin: http://{addrport}/admin/  (Ctrl-C stops everything)"))
        stopping = False

        def stop(*_):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        try:
            while not stopping:
                for name, child in children.items():
                    if child.poll() is not None:
                        self.stderr.write(f"{name} exited with {child.returncode}; stopping")
                        stopping = True
                time.sleep(0.5)
        finally:
            for child in children.values():
                if child.poll() is None:
                    child.terminate()
            for child in children.values():
                try:
                    child.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    child.kill()

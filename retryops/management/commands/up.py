import logging.config
import os
import re
import secrets
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.core.management.commands.runserver import naiveip_re
from django.db import connections, transaction
from django.utils.translation import gettext

import resources.services
from resources.models import ResourcePool
from retryops import devservices, processes
from retryops.env import env_str
from retryops.management.commands.demo_receiver import DEFAULT_PORT as RECEIVER_PORT
from retryops.management.commands.demo_receiver import PAGERDUTY_PATH, SLACK_PATH
from scheduling import services as task_services
from scheduling.models import BatchConfig, RetryPolicy
from telemetry.logs import logging_config

DEMO_POOL = "demo-accounts"
# The demo batch's outcomes are random and it ticks once a minute: these show a retry and a dead
# task in the first minute whatever the dice say.
DEMO_SCRIPTS = (["TimeoutError: upstream timed out after 30s", "ok"],
                ["PermissionError: HTTP 403: account suspended by upstream"])
# What the demo's PagerDuty messages carry as routing key when the receiver stands in for PagerDuty.
DEMO_ROUTING_KEY = "retryops-demo"
# A child that exits is started again after FIRST_RESTART_SECONDS, doubling on each exit up to
# LONGEST_RESTART_SECONDS; one that had run STEADY_SECONDS before exiting starts from the first again.
FIRST_RESTART_SECONDS = 1
LONGEST_RESTART_SECONDS = 30
STEADY_SECONDS = 60


class Command(BaseCommand):
    help = ("Run RetryOps on this machine: migrate, load the retry policies, create a demo pool and admin user, "
            "then serve the web app with an RQ worker for flows, the ops process that runs the periodic steps, "
            "and a demo receiver for the Slack and PagerDuty messages of channels nobody configured.")

    def add_arguments(self, parser):
        parser.add_argument("--addrport", default="127.0.0.1:8000", help=gettext("Where to serve (default 127.0.0.1:8000)."))
        parser.add_argument("--no-serve", action="store_true", help=gettext("Prepare everything, then exit."))
        parser.add_argument("--no-demo", action="store_true", help=gettext("Do not create the demo pool and batch."))
        parser.add_argument("--receiver-port", type=int, default=RECEIVER_PORT,
                            help=gettext("Port of the demo receiver of Slack and PagerDuty messages (default "
                                         "%(port)s); it is started for the channels whose settings are empty.")
                            % {"port": RECEIVER_PORT})
        parser.add_argument("--no-receiver", action="store_true",
                            help=gettext("Do not start the demo receiver: unconfigured channels are recorded as "
                                         "skipped."))

    def handle(self, *args, addrport, no_serve, no_demo, receiver_port, no_receiver, **options):
        if "LOG_FORMAT" not in os.environ:
            # Someone reads up in a terminal: its own lines plain too, as its children's are (below).
            logging.config.dictConfig(logging_config(log_format="text", level="INFO"))
        receiver_port = None if no_receiver else receiver_port
        if not no_serve:
            self.stop_leftovers()
            self.check_port(addrport)
            if receiver_port is not None and self.demo_channels(receiver_port):
                self.check_receiver_port(receiver_port)
        call_command("migrate", interactive=False, verbosity=0)
        self.stdout.write("database migrated")
        # Only the missing ones: a policy edited in the admin must survive a restart.
        call_command("load_retry_policies", only_missing=True, stdout=self.stdout)
        if not no_demo:
            self.ensure_demo()
        self.ensure_admin()
        if no_serve:
            return
        self.serve(addrport, receiver_port)

    def run_files(self) -> processes.RunFiles:
        return processes.RunFiles(devservices.EMBEDDED_DIR / "up")

    def stop_leftovers(self) -> None:
        """Stop what an `up` that crashed (kill -9, a power cut) left running: its port, its
        scheduler lock and its old code would otherwise stay taken."""
        for up, name, pid in self.run_files().stop_leftovers():
            self.stdout.write(self.style.WARNING(f"stopped the {name} (pid {pid}) that a crashed manage.py up "
                                                 f"(pid {up}) left running"))

    def check_port(self, addrport: str) -> None:
        """Refuse to start when the web server could not listen, before any worker starts."""
        match = re.match(naiveip_re, addrport)
        if match is None:
            raise CommandError(f"--addrport {addrport!r} is not a port number or an address:port pair")
        addr, _ipv4, ipv6, _fqdn, port = match.groups()
        host = (addr[1:-1] if ipv6 else addr) if addr else "127.0.0.1"
        reason = processes.port_holder(host, int(port))
        if reason:
            raise CommandError(f"cannot serve on {addrport}: {reason}. Free it, or serve elsewhere with --addrport")

    def check_receiver_port(self, port: int) -> None:
        if not 0 < port < 65536:
            raise CommandError(f"--receiver-port must be a port number from 1 to 65535, got {port}")
        reason = processes.port_holder("127.0.0.1", port)
        if reason:
            raise CommandError(f"cannot start the demo receiver on 127.0.0.1:{port}: {reason}. Free it, choose "
                               "another with --receiver-port, or do without it with --no-receiver")

    def demo_channels(self, receiver_port: int) -> dict[str, str]:
        """The notifier settings that point the channels the operator left unconfigured at the demo
        receiver; none when both are configured."""
        base = f"http://127.0.0.1:{receiver_port}"
        routed = {}
        if not settings.RETRYOPS_SLACK_WEBHOOK_URL:
            routed["RETRYOPS_SLACK_WEBHOOK_URL"] = base + SLACK_PATH
        # An operator who named a PagerDuty URL without a key meant that endpoint: it stays theirs.
        if not settings.RETRYOPS_PAGERDUTY_ROUTING_KEY and not env_str("RETRYOPS_PAGERDUTY_URL"):
            routed |= {"RETRYOPS_PAGERDUTY_URL": base + PAGERDUTY_PATH,
                       "RETRYOPS_PAGERDUTY_ROUTING_KEY": DEMO_ROUTING_KEY}
        return routed

    def notifications_summary(self, receiver_port: int | None) -> str:
        """Where each channel's messages go, as `serve` prints it."""
        routed = self.demo_channels(receiver_port) if receiver_port is not None else {}
        said = []
        for label, variable in (("Slack", "RETRYOPS_SLACK_WEBHOOK_URL"), ("PagerDuty", "RETRYOPS_PAGERDUTY_ROUTING_KEY")):
            if variable in routed:
                said.append(f"{label} to the demo receiver, http://127.0.0.1:{receiver_port}/")
            elif getattr(settings, variable):
                said.append(f"{label} as configured")
            else:
                said.append(f"{label} recorded as skipped")
        return (f"notifications: {'; '.join(said)}. Real Slack and PagerDuty are configured by "
                "RETRYOPS_SLACK_WEBHOOK_URL, RETRYOPS_PAGERDUTY_ROUTING_KEY and RETRYOPS_PAGERDUTY_URL")

    def ensure_demo(self) -> None:
        if ResourcePool.objects.filter(name=DEMO_POOL).exists():
            self.stdout.write(f"demo pool {DEMO_POOL} exists already")
            return
        with transaction.atomic():  # all of the demo or none: a later run skips it when the pool exists
            self.create_demo()
        self.stdout.write(f"created demo pool {DEMO_POOL} (50 accounts), batch config demo-signups and two demo tasks "
                          "(one is retried, one ends dead)")

    def create_demo(self) -> None:
        pool = resources.services.create_pool(name=DEMO_POOL, resource_noun="account", lease_seconds=120,
                                              description="Demo signup accounts; the demo batch runs flows on them.")
        resources.services.add_resources(pool=pool, resources=[
            {"key": f"user{n:02d}@demo.example", "label": f"Demo user {n}", "attributes": {"region": ["eu", "us"][n % 2]}}
            for n in range(1, 51)
        ])
        BatchConfig.objects.create(
            name="demo-signups", pool=pool, flow="demo", policy=RetryPolicy.objects.get(name="fast"),
            payload={"failure_rate": 0.3, "non_retryable_rate": 0.03, "sleep": 0.5},
            tasks_per_tick=5, retry_failed_first=True, recent_window_seconds=600,
        )
        for script in DEMO_SCRIPTS:
            task_services.start_task(flow="demo", pool_name=pool, payload={"script": script, "sleep": 0.5},
                                     policy="fast", created_by="manage.py up")

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

    def child_processes(self, addrport: str, receiver_port: int | None = RECEIVER_PORT
                        ) -> dict[str, tuple[list[str], dict[str, str]]]:
        """The command line and environment of each process `up` serves with, by name. The ops
        process runs the periodic steps outside RQ, so a backlog of flows never delays the
        dispatcher or the batch ticks; the flow worker takes due retries before new tasks, and runs
        RQ's scheduler, which moves delayed retries onto their queue. The demo receiver stands in
        for the notification channels nobody configured (no receiver when `receiver_port` is None)."""
        from scheduling.queueing import WORKER_QUEUES
        from telemetry.health.heartbeats import WORKER_TTL

        manage = [sys.executable, str(settings.BASE_DIR / "manage.py")]
        # A short TTL makes an idle worker heartbeat every 30 s, so /readyz sees it (telemetry.health.heartbeats).
        worker_options = ["--worker-ttl", str(WORKER_TTL)]
        # The children inherit DATABASE_URL and REDIS_URL (devservices wrote them), so they use the
        # servers this process chose, embedded ones included, which live as long as it does.
        env = os.environ.copy()
        # Someone reads these logs in a terminal: plain lines, unless LOG_FORMAT says otherwise.
        env.setdefault("LOG_FORMAT", "text")
        routed = self.demo_channels(receiver_port) if receiver_port is not None else {}
        for name in routed:
            env.pop(f"{name}_FILE", None)  # it would win over the variable (retryops.env.env_str)
        env |= routed
        children = {
            "worker": ([*manage, "rqworker", *WORKER_QUEUES, "--with-scheduler", *worker_options], env),
            "ops": ([*manage, "ops"], env),
            "web": ([*manage, "runserver", addrport, "--noreload"], env),
        }
        if routed:
            children["demo receiver"] = ([*manage, "demo_receiver", "--port", str(receiver_port)], env)
        return children

    def serve(self, addrport: str, receiver_port: int | None) -> None:
        connections.close_all()  # this process only waits from here on
        # The children get SIGTERM when this process dies, also by SIGKILL, so none outlives it
        # holding the port, the scheduler lock or old code; the run file catches the rest.
        die_with_up = processes.die_with_parent()
        commands = self.child_processes(addrport, receiver_port)

        def start(name: str) -> subprocess.Popen:
            cmd, env = commands[name]
            return subprocess.Popen(cmd, env=env, preexec_fn=die_with_up)

        children = {name: start(name) for name in commands}
        started = dict.fromkeys(children, time.monotonic())
        delays = dict.fromkeys(children, FIRST_RESTART_SECONDS)
        restart_at: dict[str, float] = {}  # the children that exited, and when they start again
        run_files = self.run_files()
        run_file = run_files.write({name: child.pid for name, child in children.items()})
        self.stdout.write(self.notifications_summary(receiver_port))
        self.stdout.write(self.style.SUCCESS(f"admin: http://{addrport}/admin/  (Ctrl-C stops everything)"))
        stopping = False

        def stop(*_):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        try:
            while not stopping:
                now = time.monotonic()
                for name, child in children.items():
                    if name in restart_at:
                        if now >= restart_at[name]:
                            del restart_at[name]
                            children[name], started[name] = start(name), now
                            run_files.write({name: child.pid for name, child in children.items()
                                             if child.poll() is None})
                    elif child.poll() is not None:
                        # One child down (a crash, an OOM kill) need not stop the others: Redis or
                        # the database away is waited out by the workers themselves.
                        if now - started[name] >= STEADY_SECONDS:
                            delays[name] = FIRST_RESTART_SECONDS
                        delay = delays[name]
                        delays[name] = min(delay * 2, LONGEST_RESTART_SECONDS)
                        restart_at[name] = now + delay
                        self.stderr.write(f"{name} (pid {child.pid}) exited with {child.returncode}; "
                                          f"restarting it in {delay} s")
                time.sleep(0.5)
        finally:
            processes.stop([processes.identity(child.pid) for child in children.values() if child.poll() is None])
            for child in children.values():
                child.poll()  # reaped by stop(): let Popen know
            run_file.unlink(missing_ok=True)

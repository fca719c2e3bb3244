"""The ops process (retryops.ops): one leader among its copies, a budget per step, and no step run
by a leader that lost the lock. On the real PostgreSQL, with real processes where a death is tested."""

import re
import signal
import subprocess
import threading
import time

import psycopg
import pytest

from retryops import ops
from telemetry.health.heartbeats import OPS_LOCK_KEY, ops_processes
from tests.telemetry.processes import environment, manage, stop, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

STEP_LINE = re.compile(r"ops step=(?P<step>\w+) process=\S+:(?P<pid>\d+) ")


def step_runs(path) -> list[tuple[str, int]]:
    return [(m["step"], int(m["pid"])) for m in map(STEP_LINE.search, path.read_text().splitlines()) if m]


@pytest.fixture
def running_ops():
    """Starts Ops objects in threads of this process; stops them on the way out."""
    started = []

    def start(*steps: ops.Step) -> ops.Ops:
        process = ops.Ops(steps)
        thread = threading.Thread(target=process.run, daemon=True)
        thread.start()
        started.append((process, thread))
        return process

    yield start
    for process, thread in started:
        process.stopping.set()
        thread.join(timeout=30)


@pytest.mark.slow
def test_two_ops_processes_never_run_a_step_at_once_and_the_standby_takes_over_when_the_leader_is_killed(tmp_path):
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    command = ["ops", "--every", "dispatch=0.5"]
    processes = [manage(*command, env=environment(LOG_FORMAT="text"), stdout=log.open("w"), stderr=subprocess.STDOUT)
                 for log in logs]
    try:
        wait_for(lambda: sum(map(len, map(step_runs, logs))) >= 5, timeout=60)
        wait_for(lambda: ops_processes() == (2, 1), timeout=30)
        leader = next(i for i, log in enumerate(logs) if step_runs(log))
        standby = 1 - leader
        assert {pid for _, pid in step_runs(logs[leader])} == {processes[leader].pid}
        assert step_runs(logs[standby]) == [], "the standby ran a step while the leader held the lock"

        processes[leader].send_signal(signal.SIGKILL)
        processes[leader].wait()
        killed = time.monotonic()
        wait_for(lambda: ("dispatch", processes[standby].pid) in step_runs(logs[standby]), timeout=30, every=0.1)
        handover = time.monotonic() - killed

        assert handover < 10
        assert ops_processes() == (1, 1)
    finally:
        stop(*processes)


def test_a_hanging_step_does_not_delay_the_dispatch_step(running_ops):
    dispatched, released = [], threading.Event()
    hanging = ops.Step("notifications", lambda: released.wait(60), 0.1)
    dispatch = ops.Step("dispatch", lambda: dispatched.append(time.monotonic()), 0.1)
    try:
        running_ops(hanging, dispatch)
        wait_for(lambda: len(dispatched) >= 10, timeout=30, every=0.05)
    finally:
        released.set()

    gaps = [later - earlier for earlier, later in zip(dispatched, dispatched[1:])]
    assert max(gaps) < 5, gaps


def test_a_step_never_runs_twice_at_once_even_when_slower_than_its_cadence(running_ops):
    running, most = [0], [0]
    guard = threading.Lock()

    def slow():
        with guard:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.3)
        with guard:
            running[0] -= 1

    calls = []
    running_ops(ops.Step("dispatch", lambda: (calls.append(1), slow()), 0.05))
    wait_for(lambda: len(calls) >= 4, timeout=30, every=0.05)

    assert most[0] == 1


def test_a_leader_paused_past_its_session_runs_no_step_when_it_wakes(monkeypatch):
    monkeypatch.setattr(ops, "IDLE_SESSION_SECONDS", 1)
    ran = []
    leader = ops.Ops((ops.Step("dispatch", lambda: ran.append(1), 1),))
    assert leader.lock.take()
    leader.leading.set()

    time.sleep(2)  # paused: its lock's session sits idle, and the server ends it
    with ops.connect() as standby:
        assert wait_for(lambda: standby.execute("SELECT pg_try_advisory_lock(%s)", [OPS_LOCK_KEY]).fetchone()[0],
                        timeout=10)
        assert leader.run_step(leader.steps[0]) is None

    assert ran == []
    assert not leader.leading.is_set()
    leader.lock.release()


def test_with_cadences_refuses_a_step_nobody_runs():
    with pytest.raises(ValueError, match="no step dispach"):
        ops.with_cadences({"dispach": 1})
    assert {s.name: s.every for s in ops.with_cadences({"dispatch": 1})}["dispatch"] == 1


def test_the_ops_command_refuses_a_transaction_pooler(settings):
    from django.core.management import CommandError, call_command

    settings.DB_TRANSACTION_POOLER = True
    with pytest.raises(CommandError, match="point its DATABASE_URL at PostgreSQL itself"):
        call_command("ops")


def test_a_leader_that_lost_the_lock_mid_step_keeps_the_new_leader_from_that_step_until_it_ends():
    # A leader paused mid-step past its lock's session wakes and finishes the step; meanwhile the
    # standby has the lock. The step's own lock keeps the two runs of the step apart.
    inside, release, ran = threading.Event(), threading.Event(), []
    old = ops.Ops((ops.Step("batch_ticks", lambda: (inside.set(), release.wait(30)), 60),))
    assert old.lock.take()
    running = threading.Thread(target=old.run_step, args=(old.steps[0],), daemon=True)
    running.start()
    try:
        assert inside.wait(10)
        old.lock.release()  # its lock's session ended while it was paused in the step
        new = ops.Ops((ops.Step("batch_ticks", lambda: ran.append(1), 60),))
        assert new.lock.take()
        assert new.run_step(new.steps[0]) is None
        assert ran == []
    finally:
        release.set()
        running.join(timeout=30)
    assert new.run_step(new.steps[0]) is True
    assert ran == [1]
    new.lock.release()


def test_a_step_that_never_returns_does_not_keep_the_process_from_stopping(running_ops, monkeypatch):
    monkeypatch.setattr(ops, "STOP_WAIT_SECONDS", 1)
    inside, never = threading.Event(), threading.Event()  # `never` is set only to end the test
    process = running_ops(ops.Step("notifications", lambda: (inside.set(), never.wait()), 60))
    try:
        assert inside.wait(10)
        runner = next(t for t in threading.enumerate() if t.name == "ops-notifications")

        process.stopping.set()
        wait_for(lambda: not process.lock.conn, timeout=10, every=0.05)

        assert runner.is_alive()  # still in the step: the process's exit ends it, as a daemon thread
        with ops.connect() as standby:
            assert standby.execute("SELECT pg_try_advisory_lock(%s)", [OPS_LOCK_KEY]).fetchone()[0]
    finally:
        never.set()
        runner.join(timeout=10)


def test_a_step_past_its_budget_stops_the_process_and_frees_the_lock_for_the_standby(running_ops, monkeypatch):
    monkeypatch.setattr(ops, "STOP_WAIT_SECONDS", 1)
    never = threading.Event()  # set only to end the test
    hung = ops.Step("notifications", never.wait, 60, budget=1)
    process = running_ops(hung, ops.Step("dispatch", lambda: None, 1))
    try:
        wait_for(lambda: process.stopping.is_set(), timeout=20, every=0.1)

        assert process.overran == hung
        wait_for(lambda: not process.lock.conn, timeout=10, every=0.05)
        with ops.connect() as standby:
            assert standby.execute("SELECT pg_try_advisory_lock(%s)", [OPS_LOCK_KEY]).fetchone()[0]
    finally:
        never.set()


def test_a_process_that_cannot_try_for_the_lock_says_why_once(monkeypatch, caplog):
    def refused(**options):
        raise psycopg.OperationalError('unrecognized configuration parameter "idle_session_timeout"')

    monkeypatch.setattr(ops, "connect", refused)
    lock = ops.Lock()

    assert (lock.take(), lock.take()) == (False, False)
    said = [r.getMessage() for r in caplog.records if r.name == "retryops.ops"]
    assert said == ['ops process cannot try for the lock: unrecognized configuration parameter "idle_session_timeout"']

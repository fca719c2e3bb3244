from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from resources.models import Resource


def test_sweep_leases_command_sweeps_expired_leases_and_reports_them(claimed_alice):
    Resource.objects.filter(pk=claimed_alice.pk).update(
        leased_at=timezone.now() - timedelta(hours=2), leased_until=timezone.now() - timedelta(hours=1),
        lapse_seen_at=timezone.now() - timedelta(hours=1)
    )
    out = StringIO()
    call_command("sweep_leases", stdout=out)
    assert f"swept resource {claimed_alice.pk}: lease of task 812" in out.getvalue()
    assert "1 expired lease(s) swept" in out.getvalue()
    assert Resource.objects.get(pk=claimed_alice.pk).state == "failed"


def test_sweep_leases_command_with_nothing_expired_says_so(claimed_alice):
    out = StringIO()
    call_command("sweep_leases", stdout=out)
    assert "0 expired lease(s) swept" in out.getvalue()


def test_sweep_leases_command_refuses_a_negative_limit(db):
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="limit"):
        call_command("sweep_leases", "--limit", "-1")


def test_sweep_leases_command_says_when_a_lease_was_never_used(alice):
    from resources import services

    lease = services.claim_by_id(resource_id=alice.pk, holder="task 5", reserve=True)
    Resource.objects.filter(pk=alice.pk).update(leased_until=timezone.now() - timedelta(hours=1), lapse_seen_at=timezone.now() - timedelta(hours=1))
    out = StringIO()
    call_command("sweep_leases", stdout=out)
    assert f"swept resource {lease.pk}: lease of task 5" in out.getvalue()
    assert "(unused reservation, no failure counted)" in out.getvalue()

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from resources.models import Resource
from scheduling.models import BatchConfig, RetryPolicy


@pytest.mark.django_db
def test_up_prepares_policies_demo_data_and_an_admin_and_is_idempotent():
    out = StringIO()
    call_command("up", no_serve=True, stdout=out)
    assert "created the admin user: login admin, password " in out.getvalue()
    assert set(RetryPolicy.objects.values_list("name", flat=True)) >= {"default", "fast"}
    assert Resource.objects.filter(pool__name="demo-accounts").count() == 50
    assert BatchConfig.objects.get(name="demo-signups").retry_failed_first
    again = StringIO()
    call_command("up", no_serve=True, stdout=again)
    assert "exists already" in again.getvalue()
    assert get_user_model().objects.filter(is_superuser=True).count() == 1
    assert Resource.objects.filter(pool__name="demo-accounts").count() == 50

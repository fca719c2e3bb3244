"""Loading and saving retry policies: bad input is refused before anything is written."""

import pytest

from scheduling import services
from scheduling.errors import BadPolicy
from scheduling.models import RetryPolicy


@pytest.mark.django_db
def test_loading_something_that_is_not_text_is_a_bad_policy_naming_the_source():
    with pytest.raises(BadPolicy, match="^t.yaml: expected the YAML document as text, got int"):
        services.load_retry_policies(text=123, source="t.yaml", actor="loader")
    assert not RetryPolicy.objects.exists()

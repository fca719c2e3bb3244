"""The resource admin: operators edit labels and attributes; state, leases and statistics stay with
resources.services, even when a claim lands while the page is open."""

import pytest
from django.apps import apps
from django.db import connection
from django.db.models.signals import pre_save
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import formats, timezone, translation

from resources import services
from resources.choices import Outcome, ResourceState
from resources.models import Resource, ResourceEvent, ResourcePool
from tests.factories import ResourceFactory, ResourcePoolFactory


@pytest.fixture
def staff(admin_client):
    return admin_client


def change_url(resource):
    return reverse("admin:resources_resource_change", args=[resource.pk])


def submitted(page, **changes):
    """What the browser posts back for an admin change page as it was rendered, with `changes` typed in."""
    data = {}
    forms = [page.context["adminform"].form]
    for inline in page.context["inline_admin_formsets"]:
        formset = inline.formset
        data.update({f"{formset.prefix}-{k}": v for k, v in formset.management_form.initial.items()})
        forms += list(formset.forms)
    for form in forms:
        for name in form.fields:
            value = form[name].value()
            if value is False:
                continue  # an unticked checkbox is not posted
            data[form.add_prefix(name)] = "" if value is None else value
            if form.fields[name].show_hidden_initial:  # fields with a callable default, such as attributes
                data[form.add_initial_prefix(name)] = data[form.add_prefix(name)]
    return {**data, **changes}


def claim_when_admin_writes(resource, holder):
    """Another holder claims `resource` after the admin has read the row and before it writes it:
    the window in which a whole-row save reverts the claim. Returns the list the lease lands in."""
    leases = []

    def claim(sender, instance, **kwargs):
        if instance.pk == resource.pk and not leases:
            leases.append(services.claim_by_id(resource_id=resource.pk, holder=holder))

    pre_save.connect(claim, sender=Resource, weak=False, dispatch_uid="claim_when_admin_writes")
    return leases


@pytest.fixture
def disconnect_claims():
    yield
    pre_save.disconnect(sender=Resource, dispatch_uid="claim_when_admin_writes")
    pre_save.disconnect(sender=ResourcePool, dispatch_uid="pool_changed_meanwhile")


# editing a resource never undoes what the services did


def test_an_attribute_an_api_client_set_while_the_edit_page_was_open_survives_the_operators_edit(staff, alice):
    services.change_resource(resource=alice.pk, actor="test", attributes={"region": "eu", "tier": "gold"})
    page = staff.get(change_url(alice))
    # An external system merges a key of its own meanwhile (the API's PATCH).
    services.change_resource(resource=alice.pk, actor="api:crm", attributes={"owner": "crm"}, merge_attributes=True)

    response = staff.post(change_url(alice), submitted(page, attributes='{"region": "us"}'))

    assert response.status_code == 302
    assert Resource.objects.get(pk=alice.pk).attributes == {"region": "us", "owner": "crm"}


def test_a_claim_made_while_the_edit_page_is_open_survives_the_save(staff, alice):
    page = staff.get(change_url(alice))
    lease = services.claim_by_id(resource_id=alice.pk, holder="task 812")

    response = staff.post(change_url(alice), submitted(page, label="Alice (VIP)"))

    assert response.status_code == 302
    row = Resource.objects.get(pk=alice.pk)
    assert (row.state, row.lease_token, row.lease_holder, row.label) == (
        ResourceState.IN_USE, lease.lease_token, "task 812", "Alice (VIP)")
    services.release(resource=alice.pk, lease_token=lease.lease_token, outcome=Outcome.SUCCESS)


def test_a_claim_landing_between_the_admins_read_and_write_keeps_its_lease(staff, alice, disconnect_claims):
    page = staff.get(change_url(alice))
    leases = claim_when_admin_writes(alice, "task 812")

    staff.post(change_url(alice), submitted(page, label="Alice (VIP)"))

    row = Resource.objects.get(pk=alice.pk)
    assert (row.state, row.lease_token, row.label) == (ResourceState.IN_USE, leases[0].lease_token, "Alice (VIP)")
    released = services.release(resource=alice.pk, lease_token=leases[0].lease_token, outcome=Outcome.SUCCESS)
    assert released.state == ResourceState.AVAILABLE


def test_a_second_claimer_cannot_take_a_resource_an_admin_edit_raced_with(staff, alice, disconnect_claims):
    from resources.errors import ResourceUnavailable

    page = staff.get(change_url(alice))
    claim_when_admin_writes(alice, "task 812")
    staff.post(change_url(alice), submitted(page, label="edited"))

    with pytest.raises(ResourceUnavailable, match="in use by task 812"):
        services.claim_by_id(resource_id=alice.pk, holder="task 813")


def test_the_probation_schedule_is_not_editable(staff, alice):
    page = staff.get(change_url(alice)).content.decode()
    assert 'name="probe_after' not in page and 'name="probation_cooldown_seconds"' not in page
    assert "Probation cooldown seconds" in page  # shown, read-only


def test_a_saved_edit_that_changes_nothing_writes_nothing(staff, alice):
    page = staff.get(change_url(alice))
    with CaptureQueriesContext(connection) as queries:
        staff.post(change_url(alice), submitted(page))
    assert not [q for q in queries.captured_queries if q["sql"].startswith(f'UPDATE "{Resource._meta.db_table}"')]


def test_the_statistics_are_shown_read_only(staff, alice):
    page = staff.get(change_url(alice)).content.decode()
    assert "Failure count" in page and 'name="failure_count"' not in page


def test_a_resource_added_in_the_admin_gets_its_pool_key_and_attributes(staff, pool):
    response = staff.post(reverse("admin:resources_resource_add"), {
        "pool": pool.pk, "key": "carol@x", "label": "Carol", "attributes": '{"region": "eu"}',
        "events-TOTAL_FORMS": 0, "events-INITIAL_FORMS": 0,
    })
    assert response.status_code == 302
    carol = Resource.objects.get(pool=pool, key="carol@x")
    assert (carol.label, carol.attributes, carol.state) == ("Carol", {"region": "eu"}, ResourceState.AVAILABLE)


@pytest.mark.parametrize("typed, named", [
    ('{"limit": NaN}', "attributes.limit is nan"),
    ('{"limit": Infinity}', "attributes.limit is inf"),
    ('{"note": "a\\u0000b"}', "attributes.note contains a NUL character"),
    ('["not", "an", "object"]', "attributes must be a JSON object"),
])
def test_attributes_postgresql_cannot_store_are_refused_with_the_field_named(staff, alice, typed, named):
    page = staff.get(change_url(alice))
    response = staff.post(change_url(alice), submitted(page, attributes=typed))
    assert response.status_code == 200
    assert named in " ".join(response.context["adminform"].form.errors["attributes"])
    assert Resource.objects.get(pk=alice.pk).attributes == {}


@pytest.mark.parametrize("typed, named", [
    ('{"\\ud800": 1}', "contains a lone surrogate"),
    ('{"note": "a\\udc00b"}', "contains a lone surrogate"),
    ("[" * 5000 + "]" * 5000, "nested too deeply"),
    ('{"limit": %s}' % ("9" * 5000), "Enter a valid JSON"),  # more digits than int() reads
])
def test_attributes_the_page_cannot_show_back_are_refused_with_the_field_named_not_a_server_error(staff, alice, typed,
                                                                                                 named):
    page = staff.get(change_url(alice))
    response = staff.post(change_url(alice), submitted(page, attributes=typed))
    assert response.status_code == 200
    assert named in " ".join(response.context["adminform"].form.errors["attributes"])
    assert Resource.objects.get(pk=alice.pk).attributes == {}


@pytest.mark.parametrize("model", ["resource", "resourcepool"])
def test_pools_and_resources_are_not_deleted_in_the_admin_without_an_audit_entry(staff, pool, model):
    obj = pool if model == "resourcepool" else ResourceFactory(pool=ResourcePoolFactory(name="spare"), key="never-used")

    response = staff.post(reverse(f"admin:resources_{model}_delete", args=[obj.pk]), {"post": "yes"})

    assert response.status_code == 403
    assert type(obj).objects.filter(pk=obj.pk).exists()


def test_empty_attributes_are_stored_as_an_empty_object(staff, alice):
    page = staff.get(change_url(alice))
    staff.post(change_url(alice), submitted(page, attributes=""))
    assert Resource.objects.get(pk=alice.pk).attributes == {}


# pools


def test_a_pool_edit_writes_only_the_fields_typed_in(staff, pool, disconnect_claims):
    url = reverse("admin:resources_resourcepool_change", args=[pool.pk])
    page = staff.get(url)

    def changed_meanwhile(sender, instance, **kwargs):
        ResourcePool.objects.filter(pk=pool.pk).update(lease_seconds=900)

    pre_save.connect(changed_meanwhile, sender=ResourcePool, weak=False, dispatch_uid="pool_changed_meanwhile")
    response = staff.post(url, submitted(page, description="EU accounts"))

    assert response.status_code == 302
    row = ResourcePool.objects.get(pk=pool.pk)
    assert (row.description, row.lease_seconds) == ("EU accounts", 900)


def test_a_pool_added_in_the_admin_is_created(staff, db):
    response = staff.post(reverse("admin:resources_resourcepool_add"), {
        "name": "keys", "description": "", "resource_noun": "key", "lease_seconds": 60})
    assert response.status_code == 302
    assert ResourcePool.objects.get(name="keys").lease_seconds == 60


@pytest.mark.parametrize("lease_seconds", [0, 86400 * 365])
def test_a_pool_lease_no_lease_may_last_is_a_form_error_and_no_pool_is_added(staff, settings, db, lease_seconds):
    response = staff.post(reverse("admin:resources_resourcepool_add"), {
        "name": "keys", "description": "", "resource_noun": "key", "lease_seconds": lease_seconds})
    assert response.status_code == 200 and "lease_seconds" in response.context["adminform"].form.errors
    assert not ResourcePool.objects.filter(name="keys").exists()


def test_a_pool_edit_to_a_lease_no_lease_may_last_is_a_form_error_and_changes_nothing(staff, pool):
    url = reverse("admin:resources_resourcepool_change", args=[pool.pk])
    response = staff.post(url, submitted(staff.get(url), lease_seconds=86400 * 365))
    assert response.status_code == 200 and "lease_seconds" in response.context["adminform"].form.errors
    assert ResourcePool.objects.get(pk=pool.pk).lease_seconds == pool.lease_seconds


# list pages


LISTS = ["resources_resource", "resources_resourcepool"]


def list_queries(client, model):
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse(f"admin:{model}_changelist"))
    assert response.status_code == 200
    return len(queries.captured_queries)


@pytest.mark.parametrize("model", LISTS)
def test_an_empty_list_page_renders(staff, db, model):
    assert staff.get(reverse(f"admin:{model}_changelist")).status_code == 200


@pytest.mark.parametrize("model", LISTS)
def test_a_list_page_costs_the_same_queries_for_one_row_or_many(staff, db, model):
    first = ResourceFactory(pool=ResourcePoolFactory(name="p0"))
    services.release(resource=first.pk, outcome=Outcome.FAILURE, error="timeout",
                     lease_token=services.claim_by_id(resource_id=first.pk, holder="t").lease_token)
    one = list_queries(staff, model)
    for n in range(1, 6):
        resource = ResourceFactory(pool=ResourcePoolFactory(name=f"p{n}"))
        services.claim_by_id(resource_id=resource.pk, holder=f"task {n}")
    assert list_queries(staff, model) == one


def test_the_resource_list_shows_the_seconds_of_the_last_failure(staff, alice):
    lease = services.claim_by_id(resource_id=alice.pk, holder="task 1")
    failed = services.release(resource=alice.pk, lease_token=lease.lease_token, outcome=Outcome.FAILURE, error="timeout")

    page = staff.get(reverse("admin:resources_resource_changelist")).content.decode()

    assert timezone.localtime(failed.last_failure_at).strftime("%H:%M:%S") in page


@pytest.mark.parametrize("language", ["en", "en-us", "zh-hans"])
def test_datetimes_show_their_seconds_in_every_operator_language(language):
    moment = timezone.now().replace(second=7)
    with translation.override(language):
        shown = formats.date_format(timezone.localtime(moment), "DATETIME_FORMAT")
    assert timezone.localtime(moment).strftime("%M:07") in shown


# names


@pytest.mark.parametrize("model", list(apps.get_app_config("resources").get_models()), ids=lambda m: m.__name__)
def test_every_resource_model_has_a_readable_name(model, claimed_alice):
    obj = model.objects.first()
    assert obj is not None and "object (" not in str(obj)


def test_a_resource_event_says_what_happened_to_which_resource(claimed_alice):
    event = ResourceEvent.objects.get(resource=claimed_alice)
    assert str(event) == f"claimed of resource {claimed_alice.pk} by task 812"


def test_a_label_another_operator_changed_after_the_page_was_shown_is_kept(staff, alice):
    page = staff.get(change_url(alice))
    services.change_resource(resource=alice.pk, actor="ops:erin", label="Alice (VIP)")

    response = staff.post(change_url(alice), submitted(page, attributes='{"tier": "gold"}'))

    assert response.status_code == 302
    row = Resource.objects.get(pk=alice.pk)
    assert (row.label, row.attributes) == ("Alice (VIP)", {"tier": "gold"})


def test_a_pool_setting_changed_after_the_page_was_shown_is_kept(staff, pool):
    url = reverse("admin:resources_resourcepool_change", args=[pool.pk])
    page = staff.get(url)
    services.change_pool(pool=pool.pk, actor="ops:erin", lease_seconds=900)

    staff.post(url, submitted(page, description="EU accounts"))

    row = ResourcePool.objects.get(pk=pool.pk)
    assert (row.description, row.lease_seconds) == ("EU accounts", 900)

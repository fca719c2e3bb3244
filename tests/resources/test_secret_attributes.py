"""Secrets in a resource's attributes: stored as they are (flows need them), shown masked by the
console, the API, the audit log and the timeline; a page or a client sending the mask back keeps
the stored secret, a value typed over it replaces it."""

import json
from html import escape

import pytest
from django.urls import reverse

from audit.models import AuditEntry
from resources import services
from resources.models import Resource, ResourceEvent
from retryops.masking import MASK
from tests.api_helpers import ok, post
from tests.factories import ResourceFactory
from tests.resources.test_admin import submitted
from tests.retryops.conftest import console_groups, logged_in, member  # noqa: F401  (console_groups: the fixture)

SECRET = "hunter2-s3cr3t"
ATTRIBUTES = {"region": "eu", "password": SECRET, "upstream": {"api_key": SECRET + "-k", "url": "https://x"}}


@pytest.fixture
def carol(pool):
    return ResourceFactory(pool=pool, key="carol@x", attributes=ATTRIBUTES)


def stored(resource) -> dict:
    return Resource.objects.get(pk=resource.pk).attributes


def change_url(resource):
    return reverse("admin:resources_resource_change", args=[resource.pk])


# the console


def test_the_change_page_shows_secrets_masked_and_never_their_values(admin_client, carol):
    page = admin_client.get(change_url(carol))
    assert page.status_code == 200
    assert SECRET not in page.content.decode()
    assert json.loads(page.context["adminform"].form["attributes"].value())["password"] == MASK


@pytest.mark.usefixtures("console_groups")
def test_a_viewer_without_change_permission_sees_the_attributes_masked(carol):
    # No form for them: Django would show the field read-only, straight from the row.
    page = logged_in(member("vera", "viewers")).get(change_url(carol))
    assert page.status_code == 200
    assert SECRET not in page.content.decode()
    assert escape(f'"password": "{MASK}"') in page.content.decode()
    assert escape(f'"api_key": "{MASK}"') in page.content.decode()


def test_saving_the_page_as_shown_keeps_the_stored_secrets(admin_client, carol):
    page = admin_client.get(change_url(carol))
    response = admin_client.post(change_url(carol), submitted(page, label="Carol"))
    assert response.status_code == 302
    assert Resource.objects.get(pk=carol.pk).label == "Carol"
    assert stored(carol) == ATTRIBUTES


def test_another_attribute_edited_on_the_page_keeps_the_secrets_beside_it(admin_client, carol):
    page = admin_client.get(change_url(carol))
    shown = json.loads(page.context["adminform"].form["attributes"].value())
    response = admin_client.post(change_url(carol), submitted(page, attributes=json.dumps({**shown, "region": "us"})))
    assert response.status_code == 302
    assert stored(carol) == {**ATTRIBUTES, "region": "us"}


def test_a_secret_typed_over_the_mask_on_the_page_replaces_it(admin_client, carol):
    page = admin_client.get(change_url(carol))
    shown = json.loads(page.context["adminform"].form["attributes"].value())
    response = admin_client.post(change_url(carol), submitted(page, attributes=json.dumps({**shown, "password": "new"})))
    assert response.status_code == 302
    assert stored(carol) == {**ATTRIBUTES, "password": "new"}


def test_the_timeline_shows_a_claims_secret_details_masked(admin_client, carol):
    services.claim_by_id(resource_id=carol.pk, holder="task 1", details={"session_cookie": SECRET, "why": "test"})
    page = admin_client.get(change_url(carol)).content.decode()
    assert SECRET not in page
    assert "why: test" in page


# what is stored beside the attributes


def test_a_claims_secret_details_are_stored_masked_in_the_timeline(carol):
    services.claim_by_id(resource_id=carol.pk, holder="task 1", details={"token": SECRET, "why": "test"})
    event = ResourceEvent.objects.filter(resource=carol).latest("id")
    assert event.details == {"token": MASK, "why": "test"}


def test_the_audit_entry_of_an_attributes_change_holds_no_secret(carol):
    services.change_resource(resource=carol.pk, actor="alice", attributes={**ATTRIBUTES, "password": "next-one"})
    entry = AuditEntry.objects.filter(action="resource.change").latest("id")
    assert SECRET not in json.dumps([entry.before, entry.after]) and "next-one" not in json.dumps(entry.after)
    assert entry.after["attributes"]["password"] == MASK
    assert stored(carol)["password"] == "next-one"


def test_the_audit_page_shows_an_older_entrys_secret_masked(admin_client, carol):
    entry = AuditEntry.objects.create(actor="old", channel="admin", action="resource.change", target_type="resource",
                                      target_id=str(carol.pk), after={"attributes": {"password": SECRET}})
    page = admin_client.get(reverse("admin:audit_auditentry_change", args=[entry.pk]))
    assert page.status_code == 200
    assert SECRET not in page.content.decode()


# the API


def test_the_api_answers_attributes_with_secrets_masked(api, carol):
    body = ok(api.get(f"/api/resources/{carol.pk}/"))
    assert body["attributes"] == {"region": "eu", "password": MASK, "upstream": {"api_key": MASK, "url": "https://x"}}


def test_a_claim_through_the_api_answers_the_attributes_masked(api, carol):
    body = ok(post(api, f"/api/resources/{carol.pk}/claim", {"holder": "ext-1"}), 200)
    assert SECRET not in json.dumps(body)
    assert body["attributes"]["password"] == MASK


def test_a_patch_sending_back_what_the_api_showed_keeps_the_secrets(api, carol):
    shown = ok(api.get(f"/api/resources/{carol.pk}/"))["attributes"]
    ok(api.patch(f"/api/resources/{carol.pk}/", {"attributes": {**shown, "region": "us"}}, format="json"))
    assert stored(carol) == {**ATTRIBUTES, "region": "us"}


def test_a_patch_with_a_new_secret_replaces_it_and_answers_it_masked(api, carol):
    body = ok(api.patch(f"/api/resources/{carol.pk}/", {"attributes": {"password": "rotated"}}, format="json"))
    assert body["attributes"]["password"] == MASK
    assert stored(carol) == {**ATTRIBUTES, "password": "rotated"}


# a mask with no secret behind it


def test_a_secret_key_renamed_on_the_page_while_it_showed_the_mask_is_refused_on_the_field(admin_client, carol):
    page = admin_client.get(change_url(carol))
    shown = json.loads(page.context["adminform"].form["attributes"].value())
    renamed = {**{k: v for k, v in shown.items() if k != "password"}, "db_password": MASK}
    response = admin_client.post(change_url(carol), submitted(page, attributes=json.dumps(renamed)))
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["attributes"] == [
        f"attributes.db_password shows the mask {MASK} but no secret is stored for it: type the secret"]
    assert stored(carol) == ATTRIBUTES


def test_a_patch_adding_a_key_with_the_mask_as_its_secret_is_refused_and_nothing_is_written(api, carol):
    response = api.patch(f"/api/resources/{carol.pk}/", {"label": "Carol", "attributes": {
        "region": "us", "password": MASK, "upstream": {"api_key": MASK, "url": "https://x", "token": MASK}}},
        format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "masked_secret_unknown"
    assert error["details"]["path"] == "attributes.upstream.token"
    assert error["details"]["fields"] == {"attributes": [error["message"]]}
    assert Resource.objects.get(pk=carol.pk).label == carol.label and stored(carol) == ATTRIBUTES


def test_the_mask_refusal_is_in_chinese_for_a_chinese_operator(carol):
    from django.utils import translation

    from retryops.errors import BadInput

    with translation.override("zh-hans"), pytest.raises(BadInput) as refused:
        services.change_resource(resource=carol.pk, actor="alice", attributes={"db_password": MASK})
    assert str(refused.value) == f"attributes.db_password 显示为掩码 {MASK}，但没有为它保存的密钥：请输入密钥"

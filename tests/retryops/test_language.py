"""The console's language: the browser's (Accept-Language), or the one chosen in the switcher, else
LANGUAGE_CODE."""

import pytest
from django.urls import reverse


@pytest.fixture
def operator_client(client, django_user_model):
    user = django_user_model.objects.create_superuser("ops", "ops@example.com", "pw")
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_console_follows_the_browsers_language(operator_client):
    page = operator_client.get(reverse("admin:index"), HTTP_ACCEPT_LANGUAGE="zh-CN,zh;q=0.9,en;q=0.5")

    assert page.status_code == 200
    assert '<html lang="zh-hans"' in page.content.decode()
    assert "RetryOps 控制台" in page.content.decode()


@pytest.mark.django_db
def test_console_speaks_the_default_language_when_the_browser_names_none_it_has(operator_client):
    page = operator_client.get(reverse("admin:index"), HTTP_ACCEPT_LANGUAGE="fr-FR")

    assert '<html lang="en"' in page.content.decode()
    assert "RetryOps console" in page.content.decode()


@pytest.mark.django_db
def test_switcher_choice_outlasts_the_browsers_language(operator_client):
    answer = operator_client.post(reverse("set_language"), {"language": "zh-hans", "next": "/admin/"},
                                  HTTP_ACCEPT_LANGUAGE="en")

    assert answer.status_code == 302 and answer["Location"] == "/admin/"
    page = operator_client.get(reverse("admin:index"), HTTP_ACCEPT_LANGUAGE="en")
    assert '<html lang="zh-hans"' in page.content.decode()


@pytest.mark.django_db
def test_every_console_page_offers_the_switcher_on_the_current_language(operator_client):
    page = operator_client.get(reverse("admin:resources_resource_changelist"), HTTP_ACCEPT_LANGUAGE="zh-hans")

    html = page.content.decode()
    assert 'id="language-switcher"' in html
    assert '<option value="zh-hans" lang="zh-hans" selected>简体中文</option>' in html

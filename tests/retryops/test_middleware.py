import pytest

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("alice", "alice@example.com", "pw"))
    return client


def test_a_nul_in_an_admin_list_filter_is_400_naming_the_parameter(staff_client):
    response = staff_client.get("/admin/resources/resource/", {"state__exact": "\x00"})

    assert response.status_code == 400
    assert "state__exact" in response.content.decode()


def test_a_nul_in_a_parameter_name_is_400_showing_it_escaped(staff_client):
    response = staff_client.get("/admin/resources/resource/?a%00b=1")

    assert response.status_code == 400
    assert "a\\x00b" in response.content.decode()


def test_a_nul_in_the_admin_search_is_400(staff_client):
    response = staff_client.get("/admin/scheduling/task/", {"q": "abc\x00"})

    assert response.status_code == 400
    assert "“q”" in response.content.decode()


def test_an_ordinary_filter_still_lists(staff_client):
    assert staff_client.get("/admin/resources/resource/", {"state__exact": "failed"}).status_code == 200


def test_the_api_answers_a_nul_filter_in_its_own_error_shape(staff_client):
    response = staff_client.get("/api/tasks/", {"flow": "a\x00b"})

    assert response.status_code == 400
    assert "flow" in response.json()["error"]["details"]["fields"]


def test_the_refusal_speaks_the_operators_language(staff_client):
    response = staff_client.get("/admin/resources/resource/", {"state__exact": "\x00"}, HTTP_ACCEPT_LANGUAGE="zh-hans")

    assert "NUL 字符" in response.content.decode()

"""What the REST API's tests (tests/*/api/) read answers with."""


def ok(response, status: int = 200) -> dict:
    assert response.status_code == status, response.content
    return response.json()


def error_of(response, status: int) -> dict:
    """The `error` of an answer in the API's error shape, once its status is the one expected."""
    assert response.status_code == status, response.content
    return response.json()["error"]


def post(api, path: str, body: dict | None = None, **headers):
    return api.post(path, body or {}, format="json", **headers)

"""The REST API's plumbing, shared by every app's endpoints (<app>/api/): one error shape, API-key
and session authentication, permissions from the admin's codenames, idempotency keys, per-client
throttling, cursor pagination and the OpenAPI schema. It knows no app's models: it imports the
audit app only (the API's clients and idempotency keys live there, an API client being an actor)."""

""".ci/audit, pip-audit over requirements.lock, against a stand-in for OSV's API: a locked package
with a known vulnerability fails it naming the package; none passes; a service that does not
answer is said loudly, and fails it only when RETRYOPS_AUDIT=required."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from werkzeug import Response

ROOT = Path(__file__).resolve().parent.parent
ADVISORY = {"id": "GHSA-test-0001", "summary": "a test advisory", "affected": [{
    "package": {"name": "django", "ecosystem": "PyPI"},
    "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "99.0"}]}]}]}


def audit(osv_url: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([str(ROOT / ".ci" / "audit")], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "RETRYOPS_AUDIT_SERVICES": "osv", "RETRYOPS_AUDIT_OSV_URL": osv_url,
                               **env})


def osv(httpserver, vulnerable: set[str]) -> str:
    def answer(request):
        name = json.loads(request.data)["package"]["name"]
        return Response(json.dumps({"vulns": [ADVISORY]} if name in vulnerable else {}),
                        content_type="application/json")

    httpserver.expect_request("/v1/query", method="POST").respond_with_handler(answer)
    return httpserver.url_for("/v1/query")


@pytest.mark.slow
def test_a_locked_package_with_a_known_vulnerability_fails_the_audit_naming_it(httpserver):
    result = audit(osv(httpserver, {"django"}))
    assert result.returncode == 1, result.stderr
    assert "VULNERABLE django 5.2" in result.stderr and "GHSA-test-0001 (fixed in 99.0)" in result.stderr


@pytest.mark.slow
def test_no_known_vulnerability_passes_the_audit_saying_how_many_packages_it_audited(httpserver):
    result = audit(osv(httpserver, set()))
    assert result.returncode == 0, result.stderr
    locked = sum(1 for line in (ROOT / "requirements.lock").read_text().splitlines() if "==" in line)
    assert f"{locked} locked packages audited, no known vulnerability" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("required, status", [("", 0), ("required", 1)])
def test_a_service_that_does_not_answer_is_said_loudly(required, status):
    result = audit("http://127.0.0.1:9/v1/query", RETRYOPS_AUDIT=required)
    assert result.returncode == status, result.stderr
    assert "NO VULNERABILITY SERVICE ANSWERED -- THE DEPENDENCIES WERE NOT AUDITED" in result.stderr

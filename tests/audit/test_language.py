"""The audit log's page in Simplified Chinese: columns, filters and action names translated when
shown; the entries themselves (actions, actors, reasons) stay as they were written."""

from django.urls import reverse

from audit.context import acting_as
from audit.models import AuditEntry
from audit.services import record_audit

LIST = reverse("admin:audit_auditentry_changelist")


def test_the_audit_log_shows_its_columns_filters_and_actions_in_chinese(admin_client, alice):
    with acting_as(actor="carol", channel="admin", request_id="req-carol"):
        record_audit(action="resource.quarantine", target=alice, reason="leaked key")

    page = admin_client.get(LIST, HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()

    assert "操作人" in page and "请求 ID" in page  # columns
    assert "过去一小时" in page and "管理命令" in page  # the time and channel filters
    assert "资源已隔离" in page and "资源 alice@x（ID " in page  # the action and the target
    assert "leaked key" in page
    assert AuditEntry.objects.get(actor="carol").action == "resource.quarantine"

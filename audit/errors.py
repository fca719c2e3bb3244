"""Errors of the audit log: programming mistakes in a call of record_audit, never bad data
(values PostgreSQL cannot store are repaired, so an audit row never fails a business action)."""

from retryops.errors import DomainError


class AuditError(DomainError):
    code = "audit_error"

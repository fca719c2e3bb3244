"""deploy/prometheus/alerts.yml, written from the alert rules (`manage.py prometheus_rules`): one
Prometheus alert per rule of telemetry.alerts.rules, firing while the app says that rule fires
(retryops_alert_firing), so the app's thresholds, windows and hysteresis are the only ones; then
the two conditions the app cannot see in itself: it does not answer, or its evaluator stopped."""

import inspect

import yaml

from telemetry.alerts.jobs import EVALUATE_ALERTS_EVERY
from telemetry.alerts.rules import RULES, Rule

HEADER = """\
# RetryOps alerting rules, written by `manage.py prometheus_rules > deploy/prometheus/alerts.yml` from the
# app's alert rules (telemetry.alerts.rules): change the rules, not this file
# (tests/telemetry/test_prometheus.py fails when it differs from what the command writes).
# Each alert fires while the app's retryops_alert_firing{alert="..."} is 1: the app judges the thresholds
# and the hysteresis. The last two are what the app cannot say itself: it does not answer, or its
# evaluator stopped. runbook_url opens the console at the --public-url the command was given.
"""

# PagerDuty's severities as Alertmanager routes them: critical pages, warning goes to chat.
SEVERITIES = {"critical": "critical", "error": "critical", "warning": "warning", "info": "warning"}


def alert_name(rule: Rule) -> str:
    return f"RetryOps{type(rule).__name__}"


def _first_paragraph(rule: Rule) -> str:
    return " ".join(inspect.getdoc(type(rule)).split("\n\n")[0].split())


def _alert(name: str, expr: str, severity: str, summary: str, description: str, url: str, **timing) -> dict:
    return {"alert": name, "expr": expr, **timing, "labels": {"severity": severity},
            "annotations": {"summary": summary, "description": description, "runbook_url": url}}


def prometheus_rules(*, public_url: str) -> str:
    """The alerts.yml text: every rule's alert, then the fixed two."""
    alerts = [_alert(alert_name(rule), f'max(retryops_alert_firing{{alert="{name}"}}) == 1',
                     SEVERITIES[rule.severity], f"RetryOps alert firing: {rule.title}", _first_paragraph(rule),
                     public_url + rule.rows_url())
              for name, rule in RULES.items()]
    # Four evaluations missed, and never less than five minutes.
    stale = max(300, 4 * EVALUATE_ALERTS_EVERY)
    alerts += [
        _alert("RetryOpsDown", 'up{job="retryops"} == 0', "critical",
               "Prometheus cannot scrape RetryOps",
               "The scrape of /metrics fails: the app is down, or Prometheus's bearer token no longer matches "
               "RETRYOPS_METRICS_TOKEN. No other RetryOps alert can fire while it lasts.",
               public_url + "/admin/", **{"for": "1m"}),
        _alert("RetryOpsAlertsNotEvaluated",
               f"max(retryops_alert_evaluation_age_seconds) > {stale} "
               'or (absent(retryops_alert_evaluation_age_seconds) and on() max(up{job="retryops"}) == 1)',
               "critical", "RetryOps has stopped evaluating its alert rules",
               f"The app answers but an alert rule was not evaluated for {stale} s (or never), so its alert "
               "stays as it was. Check that an ops process (manage.py ops) runs and leads (retryops_ops_leader), "
               "and its log for a rule whose evaluation fails.",
               public_url + "/admin/", **{"for": "1m"}),
    ]
    body = yaml.safe_dump({"groups": [{"name": "retryops", "interval": "30s", "rules": alerts}]},
                          sort_keys=False, width=110, allow_unicode=True)
    return HEADER + body

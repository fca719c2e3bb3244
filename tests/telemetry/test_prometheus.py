"""The shipped Prometheus rules, scrape config and Grafana dashboard (deploy/), checked by Debian's
prometheus package: promtool on the rules and on a real scrape, and a real Prometheus on loopback
scraping a live server of the app.

Without promtool or prometheus (apt-get install prometheus) the tests skip on a developer's machine
and fail in CI (tests/required.py), as the end-to-end tests do without chromium."""

import json
import re
import shutil
import subprocess
import time
from contextlib import contextmanager
from io import StringIO
from pathlib import Path

import httpx
import pytest
import yaml
from django.core.management import call_command

from scheduling import services
from scheduling.flows import flow
from tests.http_server import free_port, running
from tests.required import missing
from telemetry.alerts.prometheus import SEVERITIES, alert_name
from telemetry.alerts.rules import RULES
from telemetry.figures.selectors import COMPLETION_TARGET, RETRY_SUCCESS_TARGET
from tests.scheduling.helpers import work

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
ALERTS = PROMETHEUS_DIR / "alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "retry-recovery.json"
TOKEN = "prometheus-test-token"
# How long a started Prometheus may take to be ready, and a scraped value to show in its API.
WAIT_SECONDS = 30

# Every metric spec11.md names (the names every telemetry helper exports); the dashboard shows each.
METRICS = (
    "task_retry_scheduled_total", "task_retry_success_total", "task_retry_failure_total", "task_retry_dlq_total",
    "task_retry_escalated_total",
    "retryops_tasks_waiting", "retryops_retries_overdue", "retryops_attempts_running", "retryops_dlq_length",
    "retryops_work_orders_open", "retryops_sla_breaches", "retryops_resources", "retryops_notifications_failed",
    "retryops_workers_seen", "retryops_schedulers_seen", "retryops_ops_processes", "retryops_ops_leader",
    "retryops_alert_firing",
    "retryops_retry_success_ratio", "retryops_retry_within_sla_ratio", "retryops_dead_letter_to_work_order_seconds",
    "retryops_work_order_to_compensated_seconds", "retryops_compensation_completion_ratio",
    "task_attempt_duration_seconds", "task_retry_lateness_seconds", "dead_letter_to_work_order_seconds",
    "retryops_invariant_violations", "retryops_metrics_rollup_age_seconds",
    "retryops_metrics_rollup_watermark_age_seconds", "retryops_metrics_rollup_rows_waiting",
    "retryops_oldest_transaction_age_seconds",
)


def program(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        missing(f"{name} is not installed (Debian's prometheus package)", install="apt-get install prometheus")
    return path


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([program("promtool"), *args], input=stdin, capture_output=True, text=True, timeout=60,
                          cwd=PROMETHEUS_DIR)


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels() -> list[dict]:
    """The dashboard's panels, rows left out (also the ones inside collapsed rows)."""
    found = []
    for panel in dashboard()["panels"]:
        found.extend(panel.get("panels", []) if panel["type"] == "row" else [panel])
    return found


def queries() -> list[tuple[str, str]]:
    """(where, PromQL) of every query the dashboard sends: panel targets and annotations."""
    found = [(f"panel {p['title']!r} {t['refId']}", t["expr"]) for p in panels() for t in p["targets"]]
    found += [(f"annotation {a['name']!r}", a["expr"]) for a in dashboard()["annotations"]["list"] if "expr" in a]
    return found


def as_promql(expr: str) -> str:
    """A dashboard query as Grafana sends it with every flow and pool chosen."""
    return (expr.replace("$__rate_interval", "1m").replace("$__interval", "15s")
            .replace("$flow", ".*").replace("$pool", ".*"))


def threshold_of(panel_title: str) -> float:
    panel = next(p for p in panels() if p["title"] == panel_title)
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    return next(step["value"] for step in steps if step["value"] is not None)


# --- promtool ---------------------------------------------------------------------------------------

def test_alert_rules_pass_promtool_check_rules():
    result = promtool("check", "rules", str(ALERTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_shipped_rules_are_what_the_command_writes():
    written = StringIO()
    call_command("prometheus_rules", "--public-url", "http://localhost:8000", stdout=written)
    assert ALERTS.read_text() == written.getvalue(), \
        "run: manage.py prometheus_rules --public-url http://localhost:8000 > deploy/prometheus/alerts.yml"


def shipped_alerts() -> dict[str, dict]:
    return {rule["alert"]: rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]}


def rule_test(series: dict[str, str], alert: str, fired: dict | None, *, interval: str = "1m") -> dict:
    """A promtool test case: `alert` at 10 minutes of `series` fires with the labels `fired` (None: not at all)."""
    expected = [{"exp_labels": fired, "exp_annotations": shipped_alerts()[alert]["annotations"]}] if fired else []
    return {"interval": interval, "input_series": [{"series": s, "values": v} for s, v in series.items()],
            "alert_rule_test": [{"eval_time": "10m", "alertname": alert, "exp_alerts": expected}]}


def run_rule_tests(folder: Path, cases: list[dict]) -> subprocess.CompletedProcess:
    tests = folder / "alerts_test.yml"
    tests.write_text(yaml.safe_dump({"rule_files": [str(ALERTS)], "evaluation_interval": "30s", "tests": cases}))
    return promtool("test", "rules", str(tests))


def test_every_alert_fires_exactly_while_the_app_says_its_rule_fires(tmp_path):
    cases = [rule_test({f'retryops_alert_firing{{alert="{name}"}}': f"{firing}x20"}, alert_name(rule),
                       {"severity": SEVERITIES[rule.severity]} if firing else None)
             for name, rule in RULES.items() for firing in (0, 1)]
    result = run_rule_tests(tmp_path, cases)
    assert result.returncode == 0, result.stdout + result.stderr
    assert set(shipped_alerts()) == {alert_name(rule) for rule in RULES.values()} | {
        "RetryOpsDown", "RetryOpsAlertsNotEvaluated"}


def test_prometheus_says_when_the_app_is_down_or_its_evaluator_stopped(tmp_path):
    up, age = 'up{job="retryops",instance="app:8000"}', "retryops_alert_evaluation_age_seconds"
    stopped = {"severity": "critical"}
    cases = [rule_test({up: "0x10"}, "RetryOpsDown", {**stopped, "job": "retryops", "instance": "app:8000"}),
             rule_test({up: "1x10"}, "RetryOpsDown", None),
             rule_test({up: "1x10", age: "30+60x10"}, "RetryOpsAlertsNotEvaluated", stopped),
             rule_test({up: "1x10", age: "30x10"}, "RetryOpsAlertsNotEvaluated", None),
             rule_test({up: "1x10"}, "RetryOpsAlertsNotEvaluated", stopped),
             rule_test({up: "0x10"}, "RetryOpsAlertsNotEvaluated", None)]
    result = run_rule_tests(tmp_path, cases)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_severity_a_summary_a_description_and_a_runbook():
    rules = list(shipped_alerts().values())
    incomplete = [rule["alert"] for rule in rules
                  if rule.get("labels", {}).get("severity") not in ("critical", "warning")
                  or not {"summary", "description", "runbook_url"} <= set(rule.get("annotations", {}))]
    assert rules and incomplete == []


def test_prometheus_config_passes_promtool_check_config_with_its_token_file(tmp_path):
    config = scrape_config(tmp_path, target="127.0.0.1:8000", rules=ALERTS)
    result = promtool("check", "config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_real_scrape_of_the_app_passes_promtool_check_metrics(retried, client, settings):
    settings.RETRYOPS_METRICS_TOKEN = TOKEN
    response = client.get("/metrics", headers={"authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    text = response.content.decode()
    assert 'task_retry_success_total{' in text
    result = promtool("check", "metrics", stdin=text)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


# --- the dashboard ----------------------------------------------------------------------------------

def test_dashboard_is_retry_and_recovery_with_a_prometheus_datasource_menu():
    board = dashboard()
    menus = {v["name"]: v for v in board["templating"]["list"]}
    assert (board["title"], menus["datasource"]["type"], menus["datasource"]["query"]) == \
        ("Retry & Recovery", "datasource", "prometheus")


def test_every_dashboard_query_uses_the_datasource_menu():
    sources = {json.dumps(p["datasource"]) for p in panels()} | \
        {json.dumps(t["datasource"]) for p in panels() for t in p["targets"]}
    assert sources == {json.dumps({"type": "prometheus", "uid": "${datasource}"})}


def test_dashboard_panels_have_unique_ids_and_do_not_overlap():
    board = dashboard()["panels"]
    ids = [p["id"] for p in board]
    cells = {}
    for p in board:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = p["title"]
    assert len(ids) == len(set(ids))


def test_dashboard_shows_every_exported_metric():
    text = " ".join(expr for _, expr in queries())
    assert [m for m in METRICS if not re.search(rf"\b{m}(_bucket)?\b", text)] == []


def test_histograms_are_drawn_as_heatmaps_of_their_buckets():
    heatmaps = [p for p in panels() if p["type"] == "heatmap"]
    drawn = {re.search(r"(\w+)_bucket", t["expr"]).group(1) for p in heatmaps for t in p["targets"]
             if t.get("format") == "heatmap"}
    assert drawn == {"task_attempt_duration_seconds", "task_retry_lateness_seconds",
                     "dead_letter_to_work_order_seconds"}


def test_dashboard_thresholds_are_the_alert_rules_thresholds():
    assert (threshold_of("Retry failure rate (10 min)"), threshold_of("Dead-letter queue length, by flow"),
            threshold_of("Metrics watermark lag"), threshold_of("Automatic retry success"),
            threshold_of("Manual compensation completion")) == \
        (RULES["retry_failure_rate"].threshold(), RULES["dlq_length"].threshold(),
         RULES["metrics_watermark_stuck"].threshold(), RETRY_SUCCESS_TARGET, COMPLETION_TARGET)


# --- a real Prometheus scraping a live server of the app -----------------------------------------------

@flow("prometheus_flaky")
def prometheus_flaky(context):
    """Times out on its first attempt and succeeds on the retry: one retry scheduled, one succeeded."""
    if context.attempt == 1:
        raise TimeoutError("upstream timed out after 30s")
    return {"ok": True}


def retry_once(pool) -> None:
    """A task whose first attempt fails and whose retry succeeds (policy "instant"), run by a burst worker."""
    services.start_task(flow="prometheus_flaky", pool_name=pool.name, payload={}, created_by="shop", policy="instant")
    work()


@pytest.fixture
def retried(transactional_db, redis_conn, pool, alice, instant_policy):
    """One real retry, committed (the task is enqueued on commit, as in production)."""
    retry_once(pool)


def scrape_config(folder: Path, *, target: str, rules: Path, interval: str = "15s") -> Path:
    """deploy/prometheus/prometheus.yml pointed at `target`, with its token file in `folder`."""
    token_file = folder / "retryops-metrics-token"
    token_file.write_text(TOKEN + "\n")
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    config["global"].update(scrape_interval=interval, scrape_timeout=interval, evaluation_interval=interval)
    config["rule_files"] = [str(rules)]
    (job,) = config["scrape_configs"]
    job["authorization"]["credentials_file"] = str(token_file)
    job["static_configs"] = [{"targets": [target]}]
    path = folder / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


@contextmanager
def prometheus_server(folder: Path, *, target: str):
    """A real Prometheus on a free loopback port, scraping `target` every second with the shipped
    config and rules (evaluated every second); yields its HTTP API's base URL."""
    rules = yaml.safe_load(ALERTS.read_text())
    for group in rules["groups"]:
        group["interval"] = "1s"
    rules_file = folder / "alerts.yml"
    rules_file.write_text(yaml.safe_dump(rules))
    config = scrape_config(folder, target=target, rules=rules_file, interval="1s")
    port = free_port()
    with running([program("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}",
                  f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                 ready_url=f"http://127.0.0.1:{port}/-/ready", wait=WAIT_SECONDS):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture
def prometheus(tmp_path, live_server, settings):
    """A Prometheus scraping the live server's /metrics with the bearer token the app expects."""
    settings.RETRYOPS_METRICS_TOKEN = TOKEN
    with prometheus_server(tmp_path, target=live_server.url.removeprefix("http://")) as base:
        yield base


def query(base: str, promql: str) -> httpx.Response:
    return httpx.get(f"{base}/api/v1/query", params={"query": promql}, timeout=10)


def wait_for(base: str, promql: str, expected: list) -> list:
    """Polls an instant query until its result's (labels, value) pairs are `expected`; returns the last."""
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        found = sorted((r["metric"], float(r["value"][1])) for r in query(base, promql).json()["data"]["result"])
        if found == expected or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


@pytest.mark.slow
def test_prometheus_scrapes_the_retry_counters_after_a_real_retry(prometheus, redis_conn, pool, alice,
                                                                  instant_policy):
    # The scrape works (the bearer token is accepted) before anything happened.
    assert wait_for(prometheus, 'sum(up{job="retryops"})', [({}, 1.0)]) == [({}, 1.0)]
    retry_once(pool)
    labels = {"flow": "prometheus_flaky", "pool": pool.name}
    scheduled = wait_for(prometheus, 'sum by (flow, pool) (task_retry_scheduled_total{flow="prometheus_flaky"})',
                         [(labels, 1.0)])
    succeeded = wait_for(prometheus, 'sum by (flow, pool) (task_retry_success_total{flow="prometheus_flaky"})',
                         [(labels, 1.0)])
    assert (scheduled, succeeded) == ([(labels, 1.0)], [(labels, 1.0)])


@pytest.mark.slow
def test_every_dashboard_query_parses_in_prometheus(prometheus):
    answers = {where: query(prometheus, as_promql(expr)) for where, expr in queries()}
    refused = {where: answer.json().get("error") for where, answer in answers.items()
               if answer.status_code != 200 or answer.json()["status"] != "success"}
    assert len(answers) > 30 and refused == {}


@pytest.mark.slow
def test_the_shipped_rules_evaluate_without_errors_on_the_apps_metrics(prometheus, retried):
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        rules = [rule for group in httpx.get(f"{prometheus}/api/v1/rules", timeout=10).json()["data"]["groups"]
                 for rule in group["rules"]]
        # Two evaluations after the first scrape: increase() needs two samples.
        if all(rule["health"] == "ok" for rule in rules) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert {rule["name"]: (rule["health"], rule.get("lastError", "")) for rule in rules if rule["health"] != "ok"} == {}
    assert len(rules) == len(re.findall(r"- (?:alert|record): ", ALERTS.read_text()))

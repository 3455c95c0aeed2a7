"""examples/grafana: the dashboard names only series (and labels) that /metrics exports."""

from __future__ import annotations

import copy
import json
import re

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from conftest import ROOT, WARM_WAIT
from unicron_plan.io import read_json
from unicron_plan.service.app import create_app

DASHBOARD = ROOT / "examples" / "grafana" / "unicron-coordinator.json"
#: PromQL words that look like names but are functions, keywords or Grafana variables
_NOT_SERIES = {"sum", "by", "rate", "increase", "histogram_quantile", "clamp_min", "max", "le", "job", "instance",
               "kind", "source", "dry_run", "without", "on", "ignoring", "label_values"}


def _exported(tmp_path) -> dict[str, set[str]]:
    """Sample name -> label names, from a coordinator that planned, answered from contingency and applied."""
    inst = read_json(ROOT / "instances" / "paper-128-a800.json")
    base = copy.deepcopy(inst)
    ev = base.pop("event")
    with TestClient(create_app(tmp_path / "s"), base_url="http://127.0.0.1") as c:
        c.put("/v1/cluster", json=base)
        assert c.app.state.coordinator.wait_contingency(WARM_WAIT)
        c.post("/v1/events?dry_run=true", json=ev)
        plan = c.post("/v1/events", json=ev).json()
        c.post(f"/v1/plans/{plan['plan_id']}/apply")
        text = c.get("/metrics").text
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return out


def _queries(dashboard: dict) -> list[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return exprs


def test_dashboard_names_only_exported_series(tmp_path):
    dashboard = json.loads(DASHBOARD.read_text())
    exported = _exported(tmp_path)
    queries = _queries(dashboard)
    assert len(queries) >= 10
    used = set()
    for q in queries:
        for name in re.findall(r"\b(unicron_[a-z0-9_]+)\b", q):
            assert name in exported, f"{name} in {q!r} is not exported by /metrics"
            used.add(name)
        # label names used in matchers and by (...) clauses exist on the series queried
        labels = set(re.findall(r"(\w+)\s*=~?\s*\"", q)) | {
            w for grp in re.findall(r"by \(([^)]*)\)", q) for w in re.split(r"\s*,\s*", grp)}
        series_labels = set().union(*(exported[n] for n in re.findall(r"\b(unicron_[a-z0-9_]+)\b", q)))
        assert labels - {"job", "instance"} <= series_labels, (q, labels, series_labels)
        words = set(re.findall(r"\b([a-z_][a-z0-9_]*)\s*[({\[]", q)) - _NOT_SERIES
        assert all(w.startswith("unicron_") for w in words), (q, words)
    # every part of the brief is on the dashboard
    for needed in ("unicron_plan_latency_seconds_bucket", "unicron_events_total", "unicron_contingency_hits_total",
                   "unicron_contingency_build_seconds_sum", "unicron_state_revision"):
        assert needed in used, needed


def test_the_check_catches_a_wrong_name(tmp_path):
    exported = _exported(tmp_path)
    assert "unicron_events_total" in exported
    assert "unicron_events" not in exported  # a counter's series carries _total: the check sees the difference

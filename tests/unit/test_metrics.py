"""Metrics per tenant: one registry, each tenant's view labelling its series, a tenant's render
showing nothing of another's, and a closed tenant's gauges gone while its counters stay."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from toolselect.metrics import Metrics


def _samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }


def test_each_tenants_view_labels_its_own_series() -> None:
    """Gauges set by two tenants' views are two series (not the last writer's), counters add
    up per tenant, and the process's families carry no tenant."""
    metrics = Metrics()
    a, b = metrics.for_tenant("team-a"), metrics.for_tenant("team-b")
    assert (metrics.tenant, a.tenant, b.tenant) == ("default", "team-a", "team-b")
    assert a.registry is metrics.registry
    a.catalog_size.set(3)
    b.catalog_size.set(40)
    a.flags.labels("fallback").inc()
    a.flags.labels("fallback").inc()
    b.flags.labels("fallback").inc()
    metrics.observed.inc()
    a.http_requests.labels("/v1/rank", "200").inc()
    assert a.value("toolselect_catalog_tools") == 3.0
    assert b.value("toolselect_catalog_tools") == 40.0
    assert metrics.value("toolselect_catalog_tools") is None
    assert a.value("toolselect_flagged_turns_total", {"reason": "fallback"}) == 2.0
    assert b.value("toolselect_flagged_turns_total", {"reason": "fallback"}) == 1.0
    assert metrics.value("toolselect_observed_turns_total") == 1.0
    assert a.value("toolselect_observed_turns_total") is None
    labels = {"route": "/v1/rank", "status": "200"}
    assert b.value("toolselect_http_requests_total", labels) == 1.0  # the process's


def test_a_tenants_render_shows_its_series_only() -> None:
    """`render(tenant)` keeps the samples labelled with that tenant, with their families' help
    and type, and nothing else: no other tenant's, no process-wide family."""
    metrics = Metrics()
    a, b = metrics.for_tenant("team-a"), metrics.for_tenant("team-b")
    a.catalog_size.set(3)
    a.rank_latency.observe(0.002)
    b.catalog_size.set(40)
    b.decisions.labels("teacher", "labeled").inc()
    metrics.http_requests.labels("/v1/rank", "200").inc()
    text = metrics.render("team-a")
    assert b"team-b" not in text and b"toolselect_http_requests" not in text
    assert b"# TYPE toolselect_catalog_tools gauge" in text
    seen = _samples(text)
    assert seen[("toolselect_catalog_tools", (("tenant", "team-a"),))] == 3.0
    assert seen[("toolselect_rank_seconds_count", (("tenant", "team-a"),))] == 1.0
    assert {dict(labels)["tenant"] for _, labels in seen} == {"team-a"}
    every = metrics.render()
    assert b'tenant="team-a"' in every and b'tenant="team-b"' in every
    assert b"toolselect_http_requests_total" in every


def test_a_closed_tenants_gauges_go_and_its_counters_stay() -> None:
    """`forget_tenant` removes that tenant's gauges (a queue depth or a fit would be stale),
    keeps its counters, and leaves other tenants' gauges alone."""
    metrics = Metrics()
    a, b = metrics.for_tenant("team-a"), metrics.for_tenant("team-b")
    for view, depth in ((a, 5), (b, 7)):
        view.queue_depth.set(depth)
        view.session_weight.labels("prior").set(0.5)
        view.observed.inc()
    a.forget_tenant()
    assert a.value("toolselect_observe_queue_depth") is None
    assert a.value("toolselect_session_weight", {"signal": "prior"}) is None
    assert a.value("toolselect_observed_turns_total") == 1.0
    assert b.value("toolselect_observe_queue_depth") == 7.0
    assert b.value("toolselect_session_weight", {"signal": "prior"}) == 0.5

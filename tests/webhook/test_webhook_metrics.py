"""The webhook's own metrics: every answered POST counted by webhook and result, its latency observed, served at
GET /metrics on the HTTPS port and parsed with prometheus_client's own parser."""

from __future__ import annotations

import http.client
import ssl

from prometheus_client.parser import text_string_to_metric_families

from tests.builders import pod

from .test_validating import volcano_pg


def scrape(hook) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    conn = http.client.HTTPSConnection("127.0.0.1", hook.server.port,
                                       context=ssl.create_default_context(cafile=hook.ca), timeout=10)
    try:
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("Content-Type").startswith("text/plain")
        text = resp.read().decode()
    finally:
        conn.close()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_each_answer_is_counted_by_webhook_and_result_and_timed(hook):
    assert hook.review(pod("p", group="pg"), path="/mutate")["allowed"]  # gated: a patch
    assert hook.review(pod("plain"), path="/mutate").get("patch") is None  # a basic pod: allowed as it is
    assert hook.review(volcano_pg("pg", min_member=0))["allowed"] is False
    assert hook.review(volcano_pg("ok", min_member=2))["allowed"] is True
    assert hook.post("/nowhere", b"{}")[0] == 404
    assert hook.post("/validate", b"not json")[0] == 400
    got = scrape(hook)
    count = {dict(k[1])["webhook"] + "/" + dict(k[1])["result"]: v for k, v in got.items()
             if k[0] == "gangscale_webhook_requests_total"}
    assert count == {"mutate/patched": 1, "mutate/allowed": 1, "validate/denied": 1, "validate/allowed": 1,
                     "other/404": 1, "validate/400": 1}
    timed = {dict(k[1])["webhook"]: v for k, v in got.items() if k[0] == "gangscale_webhook_request_duration_seconds_count"}
    assert timed == {"mutate": 2, "validate": 3, "other": 1}
    assert got[("gangscale_webhook_request_duration_seconds_sum", (("webhook", "validate"),))] > 0
    assert any(k[0] == "gangscale_build_info" for k in got)

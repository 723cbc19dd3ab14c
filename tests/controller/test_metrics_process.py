"""/metrics carries the process collector and `gangscale_pending_gangs{state}` from the last plan."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from builders import group, plan_for, pod, podgroup
from gangscale.controller.metrics import HealthServer, Metrics, observe_gangs


def samples(m: Metrics) -> dict[tuple[str, tuple], float]:
    text = m.render().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_metrics_endpoint_serves_process_metrics():
    m = Metrics()
    server = HealthServer("127.0.0.1:0", m, lambda: True, lambda: True).start()
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5).read().decode()
    finally:
        server.stop()
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds",
                 "process_start_time_seconds"):
        assert f"\n{name} " in text, name


def test_pending_gangs_are_counted_by_state_and_every_state_is_reset_each_pass():
    m = Metrics()
    fits = [podgroup("small", min_count=2)] + [pod(f"small-{i}", cpu="2", group="small") for i in range(2)]
    too_big = [podgroup("huge", min_count=1)] + [pod("huge-0", cpu="64", group="huge")]
    plan = plan_for(fits + too_big, [group("g", cpu="8", max_size=4)])
    observe_gangs(m, plan)
    got = samples(m)
    assert got[("gangscale_pending_gangs", (("state", "scale-up"),))] == 1
    assert got[("gangscale_pending_gangs", (("state", "infeasible"),))] == 1
    assert got[("gangscale_pending_gangs", (("state", "invalid"),))] == 0
    observe_gangs(m, plan_for(fits, [group("g", cpu="8", max_size=4)]))
    assert samples(m)[("gangscale_pending_gangs", (("state", "infeasible"),))] == 0

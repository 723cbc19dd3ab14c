"""List + watch against the emulated API: bookmarks, dropped watches, 410 Gone, backoff, pagination."""

from __future__ import annotations

import time
from typing import Any, Callable

import pytest

from gangscale.ingest import ingest
from gangscale.kube.client import KubeClient
from gangscale.kube.discovery import choose_gang_apis, discover
from gangscale.kube.errors import GoneError
from gangscale.kube.informer import ADDED, DELETED, MODIFIED, SYNCED, Backoff, ClusterCache, Informer
from gangscale.kube.lister import list_all
from gangscale.kube.refs import NODES, PODS
from gangscale.snapshot import build_snapshot

from .conftest import load_fixture
from .emulator import Emulator

FAST = {"backoff": Backoff(initial=0.05, maximum=0.2), "watch_timeout": 30.0, "read_grace": 5.0}
NS_ML = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}


def wait_until(pred: Callable[[], Any], timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := pred():
            return value
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


def pod(name: str, ns: str = "default", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"containers": [{"name": "c", "image": "pause"}], **spec}, "status": {"phase": "Pending"}}


def names(objs: list[dict[str, Any]]) -> set[str]:
    return {o["metadata"]["name"] for o in objs}


@pytest.fixture
def pods_informer(emulator: Emulator, client: KubeClient):
    made: list[Informer] = []

    def make(**kw: Any) -> Informer:
        inf = Informer(client, PODS, **{**FAST, **kw})
        made.append(inf)
        return inf.start()

    yield make
    for inf in made:
        inf.stop()


def test_list_then_watch_follows_every_change_and_reports_it(emulator, pods_informer):
    emulator.apply(pod("a"))
    seen: list[tuple[str, str | None]] = []
    inf = pods_informer(on_change=lambda ref, kind, obj: seen.append((kind, obj and obj["metadata"]["name"])))
    assert inf.wait_synced(5)
    assert names(inf.snapshot()) == {"a"}
    emulator.apply(pod("b"))
    emulator.apply({**pod("a"), "metadata": {"name": "a", "namespace": "default", "labels": {"x": "1"}}})
    emulator.delete("v1", "Pod", "default", "b")
    wait_until(lambda: (DELETED, "b") in seen)
    assert seen == [(ADDED, "a"), (SYNCED, None), (ADDED, "b"), (MODIFIED, "a"), (DELETED, "b")]
    snap = inf.snapshot()
    assert names(snap) == {"a"} and snap[0]["metadata"]["labels"] == {"x": "1"}
    assert snap[0]["apiVersion"] == "v1" and snap[0]["kind"] == "Pod"  # list items had neither
    assert inf.resource_version == str(emulator.resource_version)


def test_bookmarks_move_the_resource_version_while_nothing_changes(emulator, pods_informer):
    inf = pods_informer()
    assert inf.wait_synced(5)
    start = int(inf.resource_version)
    emulator.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})  # another resource moves
    wait_until(lambda: int(inf.resource_version) >= emulator.resource_version > start)
    assert inf.stats.bookmarks >= 1 and inf.stats.events == 0
    assert any(r.query.get("allowWatchBookmarks") == "true" for r in emulator.requests if r.query.get("watch"))


def test_a_watch_dropped_mid_event_resumes_from_its_version_without_relisting(emulator, pods_informer):
    inf = pods_informer()
    assert inf.wait_synced(5) and emulator.wait_for_watches(1)
    rv_before = inf.resource_version
    emulator.drop_watches()  # cut in the middle of an event
    emulator.apply(pod("after-drop"))
    wait_until(lambda: "after-drop" in names(inf.snapshot()))
    assert inf.stats.lists == 1 and inf.stats.gone == 0 and inf.stats.errors >= 1
    watches = [r for r in emulator.requests if r.path == "/api/v1/pods" and r.query.get("watch")]
    assert len(watches) >= 2 and watches[1].query["resourceVersion"] >= rv_before
    assert emulator.count("GET", "/api/v1/pods", limit="500") == 1  # one list, ever


@pytest.mark.parametrize("gone_as_http", [False, True], ids=["error-event", "http-410"])
def test_410_gone_relists_and_the_cache_catches_up(make_emulator, client_for, gone_as_http):
    emu = make_emulator(release="1.36", gone_as_http=gone_as_http)
    emu.apply(pod("old"))
    inf = Informer(client_for(emu), PODS, **FAST).start()
    try:
        assert inf.wait_synced(5) and emu.wait_for_watches(1)
        emu.fail_next(2, 503, "/api/v1/pods")  # keep it away while the history goes
        emu.drop_watches()
        emu.delete("v1", "Pod", "default", "old")
        emu.apply(pod("new"))
        emu.compact()  # the informer's version is now too old
        wait_until(lambda: names(inf.snapshot()) == {"new"})
        assert inf.stats.gone == 1 and inf.stats.lists == 2
    finally:
        inf.stop()


def test_server_errors_back_off_then_sync(emulator, client):
    emulator.fail_next(3, 503, "/api/v1/pods")
    inf = Informer(client, PODS, **FAST).start()
    try:
        assert inf.wait_synced(5)
        assert inf.stats.errors == 3 and "injected failure" in inf.stats.last_error
    finally:
        inf.stop()


def test_backoff_grows_to_its_cap_and_resets():
    b = Backoff(initial=0.1, maximum=0.4, jitter=0.0)
    assert [b.next() for _ in range(5)] == [0.1, 0.2, 0.4, 0.4, 0.4]
    b.reset()
    assert b.next() == 0.1


def test_a_malformed_event_is_skipped_and_the_watch_goes_on(emulator, pods_informer):
    inf = pods_informer()
    assert inf.wait_synced(5) and emulator.wait_for_watches(1)
    emulator.emit_raw("v1", "Pod", b"{not json")
    emulator.emit_raw("v1", "Pod", b'{"type": "ADDED", "object": {"metadata": {}}}')  # no name
    emulator.apply(pod("fine"))
    wait_until(lambda: "fine" in names(inf.snapshot()))
    assert inf.stats.malformed == 2 and inf.stats.errors == 0


def test_a_failing_change_handler_does_not_stop_the_cache(emulator, pods_informer):
    def boom(ref, kind, obj):
        raise RuntimeError("handler bug")

    inf = pods_informer(on_change=boom)
    assert inf.wait_synced(5)
    emulator.apply(pod("x"))
    wait_until(lambda: "x" in names(inf.snapshot()))


def test_pagination_reads_every_page_and_types_the_items(emulator, client):
    for i in range(7):
        emulator.apply(pod(f"p{i}"))
    result = list_all(client, PODS, page_size=2)
    assert result.pages == 4 and names(result.items) == {f"p{i}" for i in range(7)}
    assert all(o["apiVersion"] == "v1" and o["kind"] == "Pod" for o in result.items)
    assert emulator.count("GET", "/api/v1/pods", limit="2") == 4


def test_an_expired_continue_token_restarts_the_list_once(emulator, client):
    for i in range(5):
        emulator.apply(pod(f"p{i}"))
    emulator.expire_continue_after = 1  # the first continue page answers 410
    result = list_all(client, PODS, page_size=2)
    assert names(result.items) == {f"p{i}" for i in range(5)}
    assert emulator.count("GET", "/api/v1/pods", limit="2") == 1 + 1 + 3  # page, 410, full re-list


def test_a_list_whose_restart_expires_too_raises_gone(emulator, client, monkeypatch):
    for i in range(5):
        emulator.apply(pod(f"p{i}"))
    original = emulator._list

    def expiring(route, query):  # every continue token is already too old
        if query.get("continue"):
            emulator.apply(pod(f"churn-{emulator.resource_version}"))
            emulator.compact()
        return original(route, query)

    monkeypatch.setattr(emulator, "_list", expiring)
    with pytest.raises(GoneError):
        list_all(client, PODS, page_size=2)


def test_stop_is_prompt_even_while_a_watch_waits(make_emulator, client_for):
    emu = make_emulator(release="1.36", bookmark_interval=60.0)
    cache = ClusterCache(client_for(emu), [], **FAST).start()
    assert cache.wait_synced(5) and emu.wait_for_watches(2)
    t0 = time.monotonic()
    cache.stop()
    assert time.monotonic() - t0 < 2.0
    assert cache.informers and not any(inf.running for inf in cache.informers)


# ------------------------------------------------------- gangs through the cache


def _decisions(cache: ClusterCache) -> dict[str, str]:
    snap = build_snapshot(ingest(cache.snapshot()), [])
    return {g.name: (snap.decided[g.key].decision if g.key in snap.decided else "solvable") for g in snap.gangs}


@pytest.fixture
def gang_cache(emulator: Emulator, client: KubeClient):
    emulator.apply(NS_ML)
    apis = choose_gang_apis(discover(client))
    caches: list[ClusterCache] = []

    def make(**kw: Any) -> ClusterCache:
        cache = ClusterCache(client, apis.refs, **{**FAST, **kw}).start()
        caches.append(cache)
        assert cache.wait_synced(5)
        return cache

    yield make
    for c in caches:
        c.stop()


def test_a_podgroup_deleted_while_its_pods_remain_leaves_them_waiting(emulator, gang_cache):
    emulator.apply_all(load_fixture("nodes.yaml") + load_fixture("v1alpha2-podgroup.yaml"))
    cache = gang_cache()
    assert _decisions(cache) == {"train": "solvable"}
    emulator.delete("scheduling.k8s.io/v1alpha2", "PodGroup", "ml", "train")
    wait_until(lambda: _decisions(cache) == {"train": "waiting-for-podgroup"})
    assert sum(o["kind"] == "Pod" and o["metadata"]["namespace"] == "ml" for o in cache.snapshot()) == 3


def test_pods_created_before_their_podgroup_wait_then_become_plannable(emulator, gang_cache):
    objs = load_fixture("v1alpha2-podgroup.yaml")
    emulator.apply_all([o for o in objs if o["kind"] == "Pod"])
    cache = gang_cache()
    assert _decisions(cache) == {"train": "waiting-for-podgroup"}
    emulator.apply(next(o for o in objs if o["kind"] == "PodGroup"))
    wait_until(lambda: _decisions(cache) == {"train": "solvable"})


def test_a_namespace_keeps_its_gangs_and_the_capacity_bound_elsewhere(emulator, gang_cache):
    emulator.apply_all(load_fixture("nodes.yaml") + load_fixture("v1alpha2-podgroup.yaml"))
    emulator.apply(pod("pending-elsewhere"))
    cache = gang_cache(namespace="ml")
    got = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in cache.snapshot()}
    assert ("Pod", "default", "web-0") in got  # bound: uses node capacity
    assert ("Pod", "default", "pending-elsewhere") not in got
    assert ("PodGroup", "ml", "train") in got
    assert emulator.wait_for_watches(3)
    watched = {r.path for r in emulator.requests if r.query.get("watch")}
    assert "/apis/scheduling.k8s.io/v1alpha2/namespaces/ml/podgroups" in watched
    assert "/api/v1/pods" in watched and "/api/v1/nodes" in watched  # pods once, for the whole cluster


def test_cluster_cache_snapshot_is_one_view_of_every_resource(emulator, gang_cache):
    emulator.apply_all(load_fixture("nodes.yaml"))
    cache = gang_cache()
    kinds = {o["kind"] for o in cache.snapshot()}
    assert kinds == {"Node", "Pod"}
    assert set(cache.stats()) == {NODES.label, PODS.label, "podgroups.v1alpha2.scheduling.k8s.io"}


def test_a_server_answering_410_every_time_is_not_hammered(emulator: Emulator, pods_informer):
    emulator.fail_next(400, status=410, path_contains="/api/v1/pods")
    inf = pods_informer(backoff=Backoff(initial=0.2, maximum=0.2, jitter=0.0)).start()
    time.sleep(1.2)
    calls = emulator.count("GET", "/api/v1/pods")
    assert inf.stats.gone >= 3  # it kept trying...
    assert calls <= 10, f"{calls} requests in 1.2 s"  # ...but with backoff after the second 410 in a row


def test_a_watch_line_without_end_is_cut_off_not_buffered_forever(monkeypatch):
    from gangscale.kube import client as kclient
    from gangscale.kube.errors import KubeError

    class Endless:  # a response body that never sends a newline
        def stream(self, *_a, **_k):
            while True:
                yield b"x" * 1024

    monkeypatch.setattr(kclient, "MAX_EVENT_BYTES", 64 * 1024)
    with pytest.raises(KubeError, match="exceeded 65536 bytes"):
        list(kclient.WatchStream(Endless(), "/api/v1/pods"))  # type: ignore[arg-type]

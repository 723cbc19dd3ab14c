"""Bad requests: a clean error answer, never a crash; 413 before reading a large body; no plain HTTP."""

from __future__ import annotations

import http.client
import json
import socket
import ssl

import pytest

from tests.builders import pod


def test_a_body_that_is_not_an_admission_review_gets_a_400_naming_the_problem(hook):
    cases = [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}).encode(),
         "expected apiVersion admission.k8s.io/v1"),
        (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(), "request is missing"),
        (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}).encode(),
         "request.uid is missing"),
    ]
    for body, words in cases:
        status, doc = hook.post("/validate", body)
        assert status == 400 and words in doc["error"], (body, doc)
    status, doc = hook.post("/elsewhere", b"{}")
    assert status == 404
    assert hook.review(pod("p", group="pg"))["allowed"]  # still serving


@pytest.mark.parametrize("obj", [
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"schedulingGroup": "pg"}},
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": [1]},
    {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "metadata": {"name": "pg"}, "spec": "x"},
    {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "pg"},
     "spec": {"minMember": 2, "minResources": {"cpu": {"a": 1}}}},
    {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload", "metadata": {"name": "w"}, "spec": {"podGroups": 3}},
])
def test_a_malformed_object_inside_a_valid_review_is_denied_with_a_reason_never_a_crash(hook, obj):
    r = hook.review(obj)
    assert r["allowed"] is False and r["status"]["message"].startswith("gangscale: ")
    assert hook.review(obj, path="/mutate")["allowed"]


def test_an_oversized_body_gets_413_without_being_read(hook_factory):
    hook = hook_factory(maxBodyBytes=4096)
    status, doc = hook.post("/validate", b"x" * 5000)
    assert status == 413 and "over the limit of 4096" in doc["error"]
    # only the header counts: a client announcing 1 GB is answered before it sends any of it
    ctx = ssl.create_default_context(cafile=hook.ca)
    with socket.create_connection(("127.0.0.1", hook.server.port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 1000000000\r\n\r\n")
            assert tls.recv(64).startswith(b"HTTP/1.1 413")


def test_plain_http_is_refused(hook):
    conn = http.client.HTTPConnection("127.0.0.1", hook.server.port, timeout=5)
    with pytest.raises((ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine, socket.timeout,
                        OSError)):
        conn.request("POST", "/validate", body=b"{}", headers={"Content-Type": "application/json"})
        conn.getresponse().read()
    conn.close()
    assert hook.review(pod("p", group="pg"))["allowed"]  # the refused client cost nothing

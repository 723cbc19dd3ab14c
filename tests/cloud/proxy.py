"""A loopback HTTP proxy in front of the moto server that injects the faults moto cannot produce.

Real HTTP and real boto3 on both sides: the proxy forwards every request to
moto unchanged unless a rule claims it, then answers with a throttling
error, a failed scaling activity, a partial fleet, and so on. It also counts
the operations it saw, so tests can prove that a call was retried.
"""

from __future__ import annotations

import http.client
import json
import xml.etree.ElementTree as ET
import re
import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable
from urllib.parse import parse_qs, urlsplit


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    service: str
    action: str


@dataclass
class Response:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


Forward = Callable[[], Response]


@dataclass
class Rule:
    service: str
    action: str
    handle: Callable[[Request, Forward], Response | None]
    times: int | None = None  # None: every matching request
    skip: int = 0  # let this many matching requests through first
    hits: int = 0


_EKS_ROUTES = [
    ("POST", re.compile(r"^/clusters/[^/]+/node-groups/[^/]+/update-config$"), "UpdateNodegroupConfig"),
    ("GET", re.compile(r"^/clusters/[^/]+/updates/[^/]+$"), "DescribeUpdate"),
    ("GET", re.compile(r"^/clusters/[^/]+/node-groups/[^/]+$"), "DescribeNodegroup"),
    ("GET", re.compile(r"^/clusters/[^/]+/node-groups$"), "ListNodegroups"),
    ("GET", re.compile(r"^/clusters/[^/]+$"), "DescribeCluster"),
]


def _service(headers: dict[str, str]) -> str:
    m = re.search(r"Credential=[^/]+/[^/]+/[^/]+/([^/]+)/", headers.get("authorization", ""))
    return m.group(1) if m else ""


def _action(method: str, path: str, body: bytes) -> str:
    if body and b"Action=" in body:
        return parse_qs(body.decode())["Action"][0]
    for verb, pattern, name in _EKS_ROUTES:
        if verb == method and pattern.match(urlsplit(path).path):
            return name
    return ""


class FaultProxy:
    """Forwards to `upstream` (host, port); rules rewrite or replace chosen responses."""

    def __init__(self, upstream: tuple[str, int]):
        self.upstream = upstream
        self.rules: list[Rule] = []
        self.seen: list[tuple[str, str]] = []
        self.bodies: dict[str, list[bytes]] = {}
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                req = Request(self.command, self.path, headers, body, _service(headers),
                              _action(self.command, self.path, body))
                resp = proxy._dispatch(req)
                self.send_response(resp.status)
                for k, v in resp.headers.items():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(resp.body)))
                self.end_headers()
                self.wfile.write(resp.body)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FaultProxy":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def reset(self) -> None:
        with self._lock:
            self.rules.clear()
            self.seen.clear()
            self.bodies.clear()

    def count(self, action: str) -> int:
        with self._lock:
            return sum(1 for _, a in self.seen if a == action)

    # ------------------------------------------------------------------ core
    def _forward(self, req: Request) -> Response:
        conn = http.client.HTTPConnection(*self.upstream, timeout=30)
        try:
            headers = {k: v for k, v in req.headers.items() if k not in ("connection", "content-length")}
            conn.request(req.method, req.path, body=req.body or None, headers=headers)
            r = conn.getresponse()
            return Response(r.status, r.read(), {k: v for k, v in r.getheaders()})
        finally:
            conn.close()

    def _dispatch(self, req: Request) -> Response:
        with self._lock:
            self.seen.append((req.service, req.action))
            self.bodies.setdefault(req.action, []).append(req.body)
            rule = None
            for r in self.rules:
                if r.action == req.action and (not r.service or r.service == req.service):
                    if r.skip > 0:
                        r.skip -= 1
                        break
                    if r.times is None or r.hits < r.times:
                        r.hits += 1
                        rule = r
                        break
        if rule is not None:
            resp = rule.handle(req, lambda: self._forward(req))
            if resp is not None:
                return resp
        return self._forward(req)

    # ------------------------------------------------------------- helpers
    def add(self, action: str, handle: Callable[[Request, Forward], Response | None], *, service: str = "",
            times: int | None = None, skip: int = 0) -> Rule:
        rule = Rule(service, action, handle, times, skip)
        with self._lock:
            self.rules.append(rule)
        return rule

    def throttle(self, action: str, times: int, *, service: str = "") -> Rule:
        return self.add(action, lambda req, fwd: throttled(req), service=service, times=times)


def throttled(req: Request) -> Response:
    """The throttling error each protocol really sends."""
    rid = str(uuid.uuid4())
    if req.service == "ec2":
        body = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Errors><Error><Code>RequestLimitExceeded</Code>"
                f"<Message>Request limit exceeded.</Message></Error></Errors><RequestID>{rid}</RequestID></Response>")
        return Response(503, body.encode(), {"Content-Type": "text/xml"})
    if req.service == "eks":
        return Response(429, b'{"message":"Rate exceeded"}',
                        {"Content-Type": "application/json", "x-amzn-ErrorType": "ThrottlingException"})
    body = ("<ErrorResponse xmlns=\"http://autoscaling.amazonaws.com/doc/2011-01-01/\"><Error><Type>Sender</Type>"
            f"<Code>Throttling</Code><Message>Rate exceeded</Message></Error><RequestId>{rid}</RequestId>"
            "</ErrorResponse>")
    return Response(400, body.encode(), {"Content-Type": "text/xml"})


def failed_activity(group: str, message: str, *, status: str = "Failed") -> Response:
    """A DescribeScalingActivities answer with one failed launch, started now."""
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    body = f"""<DescribeScalingActivitiesResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/">
<DescribeScalingActivitiesResult><Activities><member>
<ActivityId>{uuid.uuid4()}</ActivityId><AutoScalingGroupName>{group}</AutoScalingGroupName>
<Description>Launching a new EC2 instance.  Status Reason: {message}</Description>
<Cause>At {now} an instance was started in response to a difference between desired and actual capacity.</Cause>
<StartTime>{now}</StartTime><EndTime>{now}</EndTime><StatusCode>{status}</StatusCode>
<StatusMessage>{message}</StatusMessage><Progress>100</Progress>
</member></Activities></DescribeScalingActivitiesResult>
<ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata></DescribeScalingActivitiesResponse>"""
    return Response(200, body.encode(), {"Content-Type": "text/xml"})


def no_capacity(world, group: str, resp: Response) -> Response:
    """After a SetDesiredCapacity `resp` of `group`: the launches a failed scaling activity reports never got
    instances, as with InsufficientInstanceCapacity (moto starts them all: take them back, desired with them)."""
    asg = world.client("autoscaling")
    for i in world.group(group).get("Instances", []):
        asg.terminate_instance_in_auto_scaling_group(InstanceId=i["InstanceId"], ShouldDecrementDesiredCapacity=True)
    return resp


def _ec2_xml(root: ET.Element) -> tuple[str, Callable[[str], str]]:
    ns = root.tag[1:].split("}")[0] if root.tag.startswith("{") else ""
    return ns, (lambda tag: f"{{{ns}}}{tag}" if ns else tag)


def _fleet_error(parent: ET.Element, q: Callable[[str], str], code: str, message: str) -> None:
    errors = parent.find(q("errorSet"))
    if errors is None:
        errors = ET.SubElement(parent, q("errorSet"))
    item = ET.SubElement(errors, q("item"))
    ET.SubElement(item, q("lifecycle")).text = "on-demand"
    ET.SubElement(item, q("errorCode")).text = code
    ET.SubElement(item, q("errorMessage")).text = message


def fleet_refused(code: str = "InsufficientInstanceCapacity",
                  message: str = "There is no Spot capacity available that matches your request.") -> Response:
    """What EC2 answers when MinTargetCapacity cannot be met: no instances at all, one error."""
    ns = "http://ec2.amazonaws.com/doc/2016-11-15/"
    root = ET.Element(f"{{{ns}}}CreateFleetResponse")
    q = lambda t: f"{{{ns}}}{t}"  # noqa: E731
    ET.SubElement(root, q("requestId")).text = str(uuid.uuid4())
    ET.SubElement(root, q("fleetId")).text = f"fleet-{uuid.uuid4()}"
    _fleet_error(root, q, code, message)
    ET.SubElement(root, q("fleetInstanceSet"))
    ET.register_namespace("", ns)
    return Response(200, ET.tostring(root), {"Content-Type": "text/xml"})


class PartialFleet:
    """Let moto launch the fleet, then hand back only `keep` of its instances (a cloud bug, defended against)."""

    def __init__(self, keep: int, code: str = "InsufficientInstanceCapacity", message: str = "partial launch"):
        self.keep, self.code, self.message = keep, code, message
        self.kept: list[str] = []
        self.dropped: list[str] = []

    def __call__(self, req: Request, forward: Forward) -> Response:
        resp = forward()
        root = ET.fromstring(resp.body)
        ns, q = _ec2_xml(root)
        for ids in root.iter(q("instanceIds")):
            for item in list(ids):
                if len(self.kept) < self.keep:
                    self.kept.append(item.text or "")
                else:
                    self.dropped.append(item.text or "")
                    ids.remove(item)
        _fleet_error(root, q, self.code, self.message)
        if ns:
            ET.register_namespace("", ns)
        return Response(200, ET.tostring(root), {"Content-Type": "text/xml"})


def json_rewrite(edit: Callable[[dict], None]) -> Callable[[Request, Forward], Response]:
    """Forward, then edit the JSON answer (EKS) in place."""

    def handle(req: Request, forward: Forward) -> Response:
        resp = forward()
        doc = json.loads(resp.body)
        edit(doc)
        return Response(resp.status, json.dumps(doc).encode(), {"Content-Type": "application/json"})

    return handle


def json_answer(doc: dict, status: int = 200, error_type: str = "") -> Response:
    headers = {"Content-Type": "application/json"}
    if error_type:
        headers["x-amzn-ErrorType"] = error_type
    return Response(status, json.dumps(doc).encode(), headers)


def query_error(code: str, message: str, status: int = 403) -> Response:
    """An Auto Scaling (query protocol) error answer."""
    body = ("<ErrorResponse xmlns=\"http://autoscaling.amazonaws.com/doc/2011-01-01/\"><Error><Type>Sender</Type>"
            f"<Code>{code}</Code><Message>{message}</Message></Error><RequestId>{uuid.uuid4()}</RequestId>"
            "</ErrorResponse>")
    return Response(status, body.encode(), {"Content-Type": "text/xml"})


class PendingInstances:
    """DescribeInstances shows every instance as `pending` for `seconds` after the proxy first reports it.

    Moto starts instances `running` at once; a real fleet's instances take tens of seconds.
    """

    def __init__(self, seconds: float, clock: Callable[[], float] | None = None):
        import time

        self.seconds = seconds
        self.clock = clock or time.monotonic
        self.first_seen: dict[str, float] = {}
        self.rewritten = 0

    def __call__(self, req: Request, forward: Forward) -> Response:
        resp = forward()
        if resp.status != 200:
            return resp
        root = ET.fromstring(resp.body)
        ns, q = _ec2_xml(root)
        now = self.clock()
        for item in root.iter(q("item")):
            iid, state = item.find(q("instanceId")), item.find(q("instanceState"))
            if iid is None or state is None or not iid.text:
                continue
            since = self.first_seen.setdefault(iid.text, now)
            name = state.find(q("name"))
            if now - since < self.seconds and name is not None and name.text == "running":
                name.text = "pending"
                code = state.find(q("code"))
                if code is not None:
                    code.text = "0"
                self.rewritten += 1
        if ns:
            ET.register_namespace("", ns)
        return Response(200, ET.tostring(root), {"Content-Type": "text/xml"})

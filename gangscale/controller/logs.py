"""Structured JSON log lines: every line a JSON object, with the gang and plan when there is one."""

from __future__ import annotations

import contextvars
import logging
import sys
from datetime import datetime, timezone

import orjson

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}

# The reconcile pass a line belongs to: every line of one pass carries the same planId.
PLAN_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "gangscale_plan_id", default=None
)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        plan_id = PLAN_ID.get()
        if plan_id:
            line["planId"] = plan_id
        for k, v in vars(record).items():
            if k not in _STANDARD and not k.startswith("_"):
                line[k] = v
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


def setup_logging(level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in (
        "botocore",
        "boto3",
        "urllib3",
        "kubernetes",
    ):  # their debug lines would drown ours
        logging.getLogger(noisy).setLevel(max(logging.INFO, root.level))

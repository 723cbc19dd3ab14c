"""Read cluster and catalog files: JSON (fast path) or YAML, one or many documents.

Every failure to read or parse becomes an `InputError` with one sentence the
CLI prints before exiting 2; nothing here raises a bare traceback.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, Iterator

import orjson
import yaml

try:  # libyaml's C loader is ~3x faster than the pure-Python one
    from yaml import CSafeLoader as _YamlLoader
except ImportError:  # pragma: no cover - libyaml missing
    from yaml import SafeLoader as _YamlLoader  # type: ignore[assignment]

try:  # optional fast path: yaml-rs (Rust) reads a 10,000-pod cluster ~25x faster than libyaml
    import yaml_rs as _yaml_rs
except ImportError:  # pragma: no cover - not installed: PyYAML does it all
    _yaml_rs = None  # type: ignore[assignment]


_TAG = re.compile(r"(?:^|[\s\[{,])!")  # a `!tag` (a `!` inside a plain or quoted word is text)


def _load_yaml_fast(text: str) -> list[Any] | None:
    """One YAML document with yaml-rs, or None to let PyYAML do it (several documents, any error).

    yaml-rs follows YAML 1.2 (`yes`/`on` stay strings, `1e3` is a number) and keeps
    timestamps as the strings Kubernetes wrote; errors are always reported by PyYAML.
    Merge keys (`<<: *anchor`), tags and directives are left to PyYAML: yaml-rs keeps
    `<<` as a plain key (the merged fields would be lost) and accepts tags PyYAML rejects.
    """
    if _yaml_rs is None or any(s in text for s in ("\n---", "\n...", "<<", "\n%")) or text.startswith("%") or (
            "!" in text and _TAG.search(text)):
        return None
    try:
        doc = _yaml_rs.loads(text, parse_datetime=False, duplicate_key_policy=_yaml_rs.DuplicateKeyPolicy.LastWins)
    except Exception:  # noqa: BLE001 - any failure: PyYAML parses it and words the error
        return None
    return [] if doc is None else [doc]


class InputError(Exception):
    """A file that cannot be read or parsed at all."""


def _read_bytes(path: str | Path) -> bytes:
    if str(path) == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None


def parse_documents(data: bytes, name: str = "<input>") -> list[Any]:
    """Parse JSON (one value) or YAML (one or more `---` documents)."""
    json_error: Exception | None = None
    if data.lstrip()[:1] in (b"{", b"["):
        try:
            return [orjson.loads(data)]
        except orjson.JSONDecodeError as exc:
            json_error = exc  # might still be YAML flow style; try that below
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{name}: not UTF-8 text") from None
    fast = _load_yaml_fast(text)
    if fast is not None:
        return fast
    try:
        docs = [d for d in yaml.load_all(text, Loader=_YamlLoader) if d is not None]
    except yaml.YAMLError as exc:
        if json_error is not None:
            raise InputError(f"{name}: invalid JSON: {json_error}") from None
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"{name}: invalid YAML{where}: {problem}") from None
    return docs


def read_documents(path: str | Path) -> list[Any]:
    return parse_documents(_read_bytes(path), str(path))


def iter_objects(docs: list[Any]) -> Iterator[Any]:
    """Flatten `kind: List` (and `*List`) documents into their items."""
    for doc in docs:
        if isinstance(doc, list):
            yield from iter_objects(doc)
        elif isinstance(doc, dict) and isinstance(doc.get("items"), list) and (
            doc.get("kind") == "List" or str(doc.get("kind", "")).endswith("List")
        ):
            yield from iter_objects(doc["items"])
        elif doc is not None:
            yield doc


def read_objects(path: str | Path) -> list[Any]:
    """All Kubernetes objects in a cluster file, `kubectl get -o json|yaml` style."""
    docs = read_documents(path)
    objs = list(iter_objects(docs))
    if not any(isinstance(o, dict) and "kind" in o for o in objs):
        raise InputError(f"{path}: no Kubernetes objects found (expected a List or objects with 'kind')")
    return objs

"""Read cluster and catalog files: JSON (fast path) or YAML, one or many documents.

Every failure to read or parse becomes an `InputError` with one sentence the
CLI prints before exiting 2; nothing here raises a bare traceback.

Invariant: a parsed document is a tree at most `MAX_DEPTH` levels deep whose
YAML aliases add at most `alias_budget(len(input))` nodes and never refer to
themselves, so no consumer (ingest, pydantic, orjson) can recurse too deep or
expand a few hundred bytes into billions of nodes.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
# A line indented (or led by `- `, `? `, `: `) this far can nest blocks thousands deep, and yaml-rs
# recurses without a limit (20,000 levels of `- ` segfault it): leave such text to libyaml's scanner.
_DEEP_BLOCK = re.compile(r"\n[ \t?:-]{200}")  # not `^` with MULTILINE: 6x slower on a 10 MB file

_LEADING_SPACE = re.compile(
    rb"[ \t\n\r\x0b\x0c]*"
)  # what bytes.lstrip() strips, without copying 80 MB to see it
MAX_DEPTH = 100  # containers around any value of a document; Kubernetes objects use about 15
_MIN_ALIAS_BUDGET = 100_000


def alias_budget(size: int) -> int:
    """Nodes YAML aliases may add to a document of `size` bytes.

    A document without aliases has at most one node per byte, so aliases may at
    most about double it (and add 100,000 nodes to a small one): a billion-laughs
    document of a few hundred bytes is refused instead of expanded.
    """
    return max(_MIN_ALIAS_BUDGET, size)


def _load_yaml_fast(text: str, budget: int) -> list[Any] | None:
    """One YAML document with yaml-rs, or None to let PyYAML do it (several documents, any error).

    yaml-rs follows YAML 1.2 (`yes`/`on` stay strings, `1e3` is a number) and keeps
    timestamps as the strings Kubernetes wrote; errors are always reported by PyYAML.
    Merge keys (`<<: *anchor`), tags and directives are left to PyYAML: yaml-rs keeps
    `<<` as a plain key (the merged fields would be lost) and accepts tags PyYAML rejects.
    """
    if (
        _yaml_rs is None
        or any(s in text for s in ("\n---", "\n...", "<<", "\n%"))
        or text.startswith("%")
        or ("!" in text and _TAG.search(text))
        or _DEEP_BLOCK.search(text)
        or _DEEP_BLOCK.match("\n" + text[:200])
    ):
        return None
    try:  # yaml-rs copies each alias; past the budget it stops, and PyYAML words the refusal
        doc = _yaml_rs.loads(
            text,
            parse_datetime=False,
            duplicate_key_policy=_yaml_rs.DuplicateKeyPolicy.LastWins,
            alias_limits=_yaml_rs.AliasLimits(max_total_replayed_events=budget),
        )
    except Exception:  # noqa: BLE001 - any failure: PyYAML parses it and words the error
        return None
    return [] if doc is None else [doc]


class InputError(Exception):
    """A file that cannot be read or parsed at all."""


def _too_deep(name: str) -> str:
    return f"{name}: nested more than {MAX_DEPTH} levels deep; refused"


_INDENT = 2
_TOO_DEEP_LINE = b"\n" + b" " * (
    _INDENT * (MAX_DEPTH + 1)
)  # a value inside MAX_DEPTH + 1 containers


def _check_tree(doc: Any, name: str) -> None:
    """Refuse a value inside more than MAX_DEPTH containers (JSON and yaml-rs give trees: no sharing).

    orjson writes the tree indented two spaces per level in a few milliseconds, so
    depth is a substring search; what orjson cannot write (keys that are not
    strings, integers past 64 bits, more than 254 levels) is walked in Python.
    """
    try:
        text = orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
    except (orjson.JSONEncodeError, TypeError):
        _walk_tree(doc, name)
        return
    if _TOO_DEEP_LINE in text:
        raise InputError(_too_deep(name))


def _walk_tree(doc: Any, name: str) -> None:
    stack: list[tuple[Any, int]] = [(doc, 1)]  # a container and the depth of its elements
    while stack:
        obj, depth = stack.pop()
        children = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, list) else ()
        if depth > MAX_DEPTH and len(children):
            raise InputError(_too_deep(name))
        for v in children:
            if isinstance(v, (dict, list)):
                stack.append((v, depth + 1))


def _check_graph(doc: Any, name: str, budget: int) -> int:
    """Refuse a PyYAML document whose aliases add more than `budget` nodes, nest too deep or form a cycle.

    PyYAML builds an alias as a second reference to the same object, so loading a
    bomb is cheap; expanding it (ingest, orjson) is not. Expanded size and height
    are memoised per shared object: the walk costs what the file holds, not what
    it expands to. Returns the nodes the aliases add.
    """
    if not isinstance(doc, (dict, list)):
        return 0
    walk = _AliasWalk(name)
    added = walk.expanded(doc) - walk.unique
    if added > budget:
        raise InputError(
            f"{name}: YAML aliases would add more than {budget:,} nodes to the {walk.unique:,} written "
            f"(an alias bomb?); refused"
        )
    return added


class _AliasWalk:
    """`_check_graph`'s depth-first walk, without recursion: InputError on a cycle or a depth past MAX_DEPTH."""

    def __init__(self, name: str) -> None:
        self.name = name
        # id -> (expanded nodes, height: containers down to its deepest value)
        self.done: dict[int, tuple[int, int]] = {}
        self.open: set[int] = set()
        self.unique = 0  # nodes as written: each container once, plus its scalars
        # [container, children, next child, expanded nodes, height]; len = elements' depth
        self.stack: list[list[Any]] = []

    def expanded(self, doc: dict[Any, Any] | list[Any]) -> int:
        """The nodes `doc` has with every alias expanded."""
        self._enter(doc)
        while self.stack:
            frame = self.stack[-1]
            children, i = frame[1], frame[2]
            if i < len(children):
                frame[2] = i + 1
                self._child(frame, children[i])
            else:
                self._leave()
        return self.done[id(doc)][0]

    def _enter(self, obj: Any) -> None:
        if id(obj) in self.open:
            raise InputError(
                f"{self.name}: a YAML alias refers to the node that contains it (a recursive structure); refused"
            )
        children = [*obj.keys(), *obj.values()] if isinstance(obj, dict) else list(obj)
        if children and len(self.stack) + 1 > MAX_DEPTH:
            raise InputError(_too_deep(self.name))
        self.unique += 1 + sum(1 for c in children if not isinstance(c, (dict, list)))
        self.open.add(id(obj))
        self.stack.append([obj, children, 0, 1, 1 if children else 0])

    def _child(self, frame: list[Any], child: Any) -> None:
        if not isinstance(child, (dict, list)):
            frame[3] += 1
        elif id(child) in self.done:  # an alias of a finished node: hang its memoised subtree here
            nodes, height = self.done[id(child)]
            if len(self.stack) + height > MAX_DEPTH:
                raise InputError(_too_deep(self.name))
            frame[3] += nodes
            frame[4] = max(frame[4], height + 1)
        else:
            self._enter(child)

    def _leave(self) -> None:
        frame = self.stack.pop()
        self.open.discard(id(frame[0]))
        self.done[id(frame[0])] = (frame[3], frame[4])
        if self.stack:
            parent = self.stack[-1]
            parent[3] += frame[3]
            parent[4] = max(parent[4], frame[4] + 1)


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
    start = _LEADING_SPACE.match(data).end()  # type: ignore[union-attr]  # (matches the empty string at worst)
    if data[start : start + 1] in (b"{", b"["):
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            json_error = exc  # might still be YAML flow style; try that below
        else:
            _check_tree(doc, name)
            return [doc]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{name}: not UTF-8 text") from None
    budget = alias_budget(len(data))
    fast = _load_yaml_fast(text, budget)
    if fast is not None:
        for doc in fast:
            _check_tree(doc, name)
        return fast
    try:
        docs = [d for d in yaml.load_all(text, Loader=_YamlLoader) if d is not None]
    except RecursionError:
        raise InputError(_too_deep(name)) from None
    except yaml.YAMLError as exc:
        if json_error is not None:
            raise InputError(f"{name}: invalid JSON: {json_error}") from None
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"{name}: invalid YAML{where}: {problem}") from None
    for doc in docs:  # anchors are per document, the budget is per file
        budget -= _check_graph(doc, name, budget)
    return docs


def read_documents(path: str | Path) -> list[Any]:
    return parse_documents(_read_bytes(path), str(path))


def iter_objects(docs: list[Any]) -> Iterator[Any]:
    """Flatten `kind: List` (and `*List`) documents into their items."""
    for doc in docs:
        if isinstance(doc, list):
            yield from iter_objects(doc)
        elif (
            isinstance(doc, dict)
            and isinstance(doc.get("items"), list)
            and (doc.get("kind") == "List" or str(doc.get("kind", "")).endswith("List"))
        ):
            yield from iter_objects(doc["items"])
        elif doc is not None:
            yield doc


def read_objects(path: str | Path) -> list[Any]:
    """All Kubernetes objects in a cluster file, `kubectl get -o json|yaml` style."""
    docs = read_documents(path)
    objs = list(iter_objects(docs))
    if not any(isinstance(o, dict) and "kind" in o for o in objs):
        raise InputError(
            f"{path}: no Kubernetes objects found (expected a List or objects with 'kind')"
        )
    return objs

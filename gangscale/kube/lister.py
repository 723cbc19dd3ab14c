"""Paginated LIST of one resource into raw dicts that `ingest()` can read.

Invariant: one list reads at most `max_items` objects in at most `max_pages`
pages, whatever the server answers (a server that always returns a
`continue` token would otherwise grow the list without end).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .client import KubeClient
from .errors import GoneError, KubeError
from .refs import ResourceRef

DEFAULT_PAGE_SIZE = 500  # kubectl's chunk size
# per resource; above the 150k pods Kubernetes' scalability limits allow
DEFAULT_MAX_ITEMS = 200_000
DEFAULT_MAX_PAGES = 10_000  # 5M items at the default page size: only a looping server gets there
Transform = Callable[[dict[str, Any]], dict[str, Any]]


def strip_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """Drop metadata.managedFields: often half of a pod's bytes, never read by the planner."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


@dataclass(slots=True)
class ListResult:
    items: list[dict[str, Any]]
    resource_version: str
    pages: int = 0
    skipped: list[str] = field(default_factory=list)  # entries that were not objects


def list_all(
    client: KubeClient,
    ref: ResourceRef,
    namespace: str | None = None,
    *,
    page_size: int = DEFAULT_PAGE_SIZE,
    transform: Transform | None = strip_managed_fields,
    label_selector: str | None = None,
    max_items: int = DEFAULT_MAX_ITEMS,
    max_pages: int = DEFAULT_MAX_PAGES,
) -> ListResult:
    """Every object of `ref`, page by page (`limit`/`continue`), from one consistent snapshot.

    A continue token that expired (410) restarts the list once from the top,
    as kubectl does; a second expiry is raised as `GoneError`. More than
    `max_items` objects or `max_pages` pages is a `KubeError` naming the resource.
    """
    path = ref.path(namespace)
    restarted = False
    result = ListResult([], "")
    token = ""
    while True:
        try:
            page = client.get(path, _query(page_size, token, label_selector))
        except GoneError:
            if not token or restarted:
                raise
            restarted, token, result = True, "", ListResult([], "")
            continue
        items = page.get("items")
        raw_meta = page.get("metadata")
        meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
        if not isinstance(items, list) and items is not None:
            raise KubeError(f"GET {path}: 'items' is not a list")
        _take_page(result, ref, items or [], meta, max_items, transform)
        token = str(meta.get("continue") or "")
        if not token:
            return result
        if result.pages >= max_pages:
            raise KubeError(
                f"listing {ref.label} stopped after {max_pages} pages ({len(result.items)} items): the server "
                "keeps answering with a continue token"
            )


def _query(page_size: int, token: str, label_selector: str | None) -> dict[str, str]:
    """One page's query: `limit`, the `continue` token after the first page, the label selector."""
    query = {"limit": str(page_size)} if page_size > 0 else {}
    if token:
        query["continue"] = token
    if label_selector:
        query["labelSelector"] = label_selector
    return query


def _take_page(
    result: ListResult,
    ref: ResourceRef,
    items: list[Any],
    meta: dict[str, Any],
    max_items: int,
    transform: Transform | None,
) -> None:
    """One page's objects into `result` (an entry that is not an object is noted, not kept); a KubeError naming
    the resource when the list would pass `max_items`."""
    result.pages += 1
    if len(result.items) + len(items) > max_items:
        raise KubeError(
            f"listing {ref.label} stopped at {max_items} items (page {result.pages}): the server keeps "
            "sending more; if the cluster really has that many, raise --max-list-items"
        )
    if not result.resource_version:  # every page of one list carries the first page's version
        result.resource_version = str(meta.get("resourceVersion") or "")
    for i, obj in enumerate(items):
        if not isinstance(obj, dict):
            result.skipped.append(f"{ref.label}: item {i} of page {result.pages} is not an object")
            continue
        obj = ref.typed(obj)
        result.items.append(transform(obj) if transform else obj)

"""The persistent memory store: Parquet part files under one URI (a local directory or s3://bucket/prefix).

Append-only and concurrency-safe without locks: every writer (one run of one task) owns one part
file, ``<uri>/records/part-<writer>.parquet``, written atomically through ResultStore; nothing ever
reads, modifies and rewrites another writer's part. Re-writing a writer's part replaces it (a resumed
run), and records carry content-hash ids, so reading deduplicates: the same record written by two
runs is one record (the earliest copy wins). Record fields are the columns below; structured fields
travel as JSON text. What a record *means* (lessons, evidence, corrections) is tasks/prior.py's business.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pyarrow as pa

from infra.runtime.storage import ResultStore

TABLE = "records"

SCHEMA = pa.schema([
    ("id", pa.string()),
    ("kind", pa.string()),
    ("task_key", pa.string()),
    ("family", pa.string()),
    ("created_at", pa.timestamp("us", tz="UTC")),
    ("expires_at", pa.timestamp("us", tz="UTC")),
    ("writer", pa.string()),
    ("record", pa.string()),  # the whole record as JSON (the columns above are for filtering by people and tools)
])


class MemoryStore:
    """Persistent records keyed by task and family; one part file per writer."""

    def __init__(self, uri: str, *, s3_endpoint_url: str | None = None):
        self.store = ResultStore(uri, s3_endpoint_url=s3_endpoint_url)
        self.uri = self.store.uri

    def write(self, writer: str, records: list[dict[str, Any]]) -> str | None:
        """Write (or replace) this writer's records atomically; nothing is written for no records."""
        if not records:
            return None
        rows = [{"id": r["id"], "kind": r["kind"], "task_key": r["task_key"], "family": r.get("family") or "",
                 "created_at": _ts(r.get("created_at")), "expires_at": _ts(r.get("expires_at")), "writer": writer,
                 "record": json.dumps(r, default=str, sort_keys=True)} for r in records]
        return self.store.write_part(TABLE, writer, rows, SCHEMA)

    def read(self, task_key: str | None = None, family: str | None = None) -> list[dict[str, Any]]:
        """Distinct records (by id, the earliest copy), optionally only those of a task key or a family.

        With both given, records of either match (the task's own and its family's).
        """
        table = self.store.read_table(TABLE)
        if table.num_rows == 0:
            return []
        cols = table.select(["id", "task_key", "family", "created_at", "record"]).to_pylist()
        seen: dict[str, dict[str, Any]] = {}
        for row in sorted(cols, key=lambda r: (r["created_at"].timestamp() if r["created_at"] else 0.0, r["id"])):
            if task_key is not None or family is not None:
                if not ((task_key is not None and row["task_key"] == task_key) or (family and row["family"] == family)):
                    continue
            seen.setdefault(row["id"], json.loads(row["record"]))
        return list(seen.values())


def _ts(value: Any) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))

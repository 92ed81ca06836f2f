"""Results as Parquet datasets under one URI: a local directory or s3://bucket/prefix.

Each finished unit of work (a question) is one part file per table, named by its task id and
written atomically (temporary name, then rename/put), so a crashed batch never leaves a partial
file and re-running a task replaces its own part instead of duplicating rows.
"""

from __future__ import annotations

import io
import re
import uuid
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


class StorageError(RuntimeError):
    """The result location cannot be used; the message names it."""


def safe_key(task_id: str) -> str:
    """A task id as a file-name-safe key (stable, and distinct ids stay distinct)."""
    cleaned = _SAFE.sub("_", task_id)
    return cleaned if cleaned == task_id else f"{cleaned}-{uuid.uuid5(uuid.NAMESPACE_URL, task_id).hex[:8]}"


class ResultStore:
    """Parquet tables of one run: `<uri>/<table>/part-<task>.parquet` plus text files beside them."""

    def __init__(self, uri: str, *, s3_endpoint_url: str | None = None):
        self.uri = uri.rstrip("/")
        options: dict[str, Any] = {}
        if self.uri.startswith("s3://") and s3_endpoint_url:
            options["client_kwargs"] = {"endpoint_url": s3_endpoint_url}
        try:
            self.fs, self.root = fsspec.core.url_to_fs(self.uri, **options)
        except Exception as exc:  # unknown protocol, missing driver
            raise StorageError(f"cannot open result location {uri!r}: {exc}") from exc
        self.local = self.fs.protocol in ("file", ("file", "local")) or "file" in self.fs.protocol
        try:
            self.fs.makedirs(self.root, exist_ok=True)
        except Exception as exc:
            raise StorageError(f"cannot create result location {uri!r}: {exc}") from exc

    def _path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def write_part(self, table: str, task_id: str, rows: list[dict[str, Any]], schema: pa.Schema) -> str:
        """Write (or replace) the rows of one task atomically; returns the part's path."""
        data = pa.Table.from_pylist(rows, schema=schema)
        buf = io.BytesIO()
        pq.write_table(data, buf)
        final = self._path(table, f"part-{safe_key(task_id)}.parquet")
        self._atomic_write(final, buf.getvalue())
        return final

    def write_text(self, name: str, text: str) -> str:
        path = self._path(name)
        self._atomic_write(path, text.encode())
        return path

    def write_bytes(self, name: str, payload: bytes) -> str:
        """Write (or replace) one file atomically, e.g. a checkpoint's weights or a plot."""
        path = self._path(name)
        self._atomic_write(path, payload)
        return path

    def read_bytes(self, name: str) -> bytes:
        with self.fs.open(self._path(name), "rb") as fh:
            return fh.read()

    def exists(self, name: str) -> bool:
        return self.fs.exists(self._path(name))

    def list_files(self, folder: str) -> list[str]:
        """Names (relative to `folder`) of the files under it, recursively; [] when it does not exist."""
        base = self._path(folder)
        if not self.fs.exists(base):
            return []
        prefix = base.rstrip("/") + "/"
        return sorted(p[len(prefix):] for p in self.fs.find(base) if p.startswith(prefix) and "/.tmp-" not in p)

    def _atomic_write(self, final: str, payload: bytes) -> None:
        parent = final.rsplit("/", 1)[0]
        self.fs.makedirs(parent, exist_ok=True)
        if self.local:
            tmp = f"{parent}/.tmp-{uuid.uuid4().hex}"
            with self.fs.open(tmp, "wb") as fh:
                fh.write(payload)
            self.fs.mv(tmp, final)  # rename within one directory: atomic on POSIX
        else:
            # An object store PUT is atomic: readers see the old object or the new one.
            self.fs.pipe_file(final, payload)

    def has_part(self, table: str, task_id: str) -> bool:
        return self.fs.exists(self._path(table, f"part-{safe_key(task_id)}.parquet"))

    def read_table(self, table: str) -> pa.Table:
        """All parts of a table; an empty table if nothing was written yet."""
        folder = self._path(table)
        if not self.fs.exists(folder):
            return pa.table({})
        files = sorted(p for p in self.fs.ls(folder, detail=False) if p.endswith(".parquet") and "/.tmp-" not in p)
        if not files:
            return pa.table({})
        tables = [pq.read_table(f, filesystem=self.fs) for f in files]
        return pa.concat_tables(tables, promote_options="default")

    def read_text(self, name: str) -> str:
        with self.fs.open(self._path(name), "rb") as fh:
            return fh.read().decode()

    def location(self, *parts: str) -> str:
        """A user-facing location (URI form) of a table or file."""
        return "/".join([self.uri, *parts])

"""Which journal files a run reads: closed ones it has not read before.

A file whose name ends in ``.open`` is still being written (``journal.OPEN_SUFFIX``) and is
never read; every other file the glob matches is (a ``.jsonl`` a user names, a ``.gz``).
A file is known by its base name (``journal-<replica>-<seq>.jsonl``: unique) and a content
hash: the hash of its size and first and last ``HASH_EDGE_BYTES`` bytes. A file of a known
name and hash is skipped, and so is a copy of a known file under another name (same hash);
a known name with another hash (a closed file changed, or two files of one name) is skipped
and reported, never counted twice. The hash reads at most 128 KiB of any file: hashing
whole files cost as much as parsing them (10 M records: ~2.5 GB), and closed journal files
never change.

Also skipped: hidden files (``.journal-<replica>.last``, the uploader's note), and a kept
copy of an uploaded file (``<name>.uploaded``) is known under its file's name, so a file read
before its upload is not read again. Object URLs (``s3://``, ``gs://``, ``az://``) are listed
by ``objects``, and their objects known by the store's digest.
"""

from __future__ import annotations

import glob
import hashlib
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO

from priority_pubsub.telemetry.journal import OPEN_SUFFIX, UPLOADED_SUFFIX

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

HASH_EDGE_BYTES = 64 * 1024


@dataclass(frozen=True)
class JournalFile:
    name: str
    path: str
    size: int
    hash: str
    local: str | None = None
    """Where to read it, when not at ``path`` (an object fetched to a local directory)."""

    @property
    def read_path(self) -> str:
        return self.local or self.path


@dataclass
class FileChoice:
    """The files matched, split into those to read now and those skipped (with why)."""

    new: list[JournalFile] = field(default_factory=list)
    already_read: int = 0
    duplicates: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    still_open: int = 0


def list_files(spark: SparkSession, journal_glob: str) -> list[tuple[str, str, int]]:
    """(name, path, size) of every file the glob (or directory) matches: local paths by
    Python itself, others through Hadoop (a JVM call per file and field: seconds on a busy
    machine for a few hundred files)."""
    if _local(journal_glob):
        return _list_local(journal_glob)
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    path = jvm.org.apache.hadoop.fs.Path(journal_glob)
    fs = path.getFileSystem(conf)
    statuses = list(fs.globStatus(path) or [])
    out: list[tuple[str, str, int]] = []
    for status in statuses:
        inside = list(fs.listStatus(status.getPath())) if status.isDirectory() else [status]
        for s in inside:
            if s.isFile():
                p = s.getPath()
                out.append((str(p.getName()), str(p.toString()), int(s.getLen())))
    return sorted(out)


def _local(path: str) -> bool:
    return "://" not in path and not path.startswith("file:") and "{" not in path


def _list_local(journal_glob: str) -> list[tuple[str, str, int]]:
    out: list[tuple[str, str, int]] = []
    for match in glob.glob(os.path.expanduser(journal_glob)):
        is_dir = os.path.isdir(match)
        inside = [os.path.join(match, n) for n in os.listdir(match)] if is_dir else [match]
        for path in inside:
            if os.path.isfile(path):
                absolute = os.path.abspath(path)
                out.append((os.path.basename(path), absolute, os.path.getsize(absolute)))
    return sorted(out)


def _edges(handle: BinaryIO, size: int) -> hashlib._Hash:
    digest = hashlib.sha256(str(size).encode())
    digest.update(handle.read(min(size, HASH_EDGE_BYTES)))
    if size > HASH_EDGE_BYTES:
        tail = min(HASH_EDGE_BYTES, size - HASH_EDGE_BYTES)
        handle.seek(size - tail)
        digest.update(handle.read(tail))
    return digest


def content_hash(spark: SparkSession, path: str, size: int) -> str:
    """sha256 of the size and the first and last ``HASH_EDGE_BYTES`` bytes."""
    if _local(path):
        with open(path, "rb") as handle:
            return _edges(handle, size).hexdigest()
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    fs = hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    digest = hashlib.sha256(str(size).encode())
    stream = fs.open(hadoop_path)
    try:
        io_utils: Any = jvm.org.apache.commons.io.IOUtils
        digest.update(bytes(io_utils.toByteArray(stream, min(size, HASH_EDGE_BYTES))))
        if size > HASH_EDGE_BYTES:
            tail = min(HASH_EDGE_BYTES, size - HASH_EDGE_BYTES)
            stream.seek(size - tail)
            digest.update(bytes(io_utils.toByteArray(stream, tail)))
    finally:
        stream.close()
    return digest.hexdigest()


Listing = list[tuple[str, str, int, str | None]]
"""(name, path, size, digest when the listing tells it) of each file matched."""


def choose(
    spark: SparkSession, journal_glob: str, known: dict[str, dict[str, Any]],
    listing: Listing | None = None,
) -> FileChoice:
    """Split the matched files (or ``listing``'s): new closed files to read, and the rest
    with the reason."""
    choice = FileChoice()
    known = dict(known)  # the files chosen now join it: a second copy of one is a duplicate
    hashes = {str(f["hash"]) for f in known.values()}
    if listing is None:
        listing = [(name, path, size, None) for name, path, size in list_files(spark, journal_glob)]
    for listed_name, path, size, listed_digest in listing:
        if listed_name.startswith("."):
            continue
        if listed_name.endswith(OPEN_SUFFIX):
            choice.still_open += 1
            continue
        name = listed_name.removesuffix(UPLOADED_SUFFIX)
        seen = known.get(name)
        if seen is not None and int(seen["size"]) == size and seen.get("path") == path:
            choice.already_read += 1  # same name, size and place: no need to hash again
            continue
        digest = listed_digest or content_hash(spark, path, size)
        if seen is not None:
            if seen["hash"] == digest:
                choice.already_read += 1
            else:
                choice.changed.append(path)
            continue
        if digest in hashes:
            choice.duplicates.append(path)
            continue
        hashes.add(digest)
        known[name] = {"hash": digest, "size": size, "path": path}
        choice.new.append(JournalFile(name, path, size, digest))
    return choice


def local_new_bytes(journal_glob: str, known: dict[str, dict[str, Any]]) -> int | None:
    """Bytes of the closed files a local glob matches that ``known`` does not hold under
    their name and size: what a run will read, sized before Spark starts (no hashing: a
    renamed copy counts as new here); None for a glob only Hadoop can list."""
    if not _local(journal_glob):
        return None
    return sum(
        size
        for name, _, size in _list_local(journal_glob)
        if not name.endswith(OPEN_SUFFIX) and not name.startswith(".")
        and int(known.get(name.removesuffix(UPLOADED_SUFFIX), {}).get("size", -1)) != size
    )

"""Debian's Contents index: which package of the suite installs which file.

Recipes ask it what a build names (cxx: the package shipping ``<name>.pc`` or ``<Name>Config.cmake``; java:
the packaged versions of a ``groupId:artifactId``). That is the general answer a hand table is not (it only
ever covers the names someone met). An index is read once per machine (some 45 MB from the mirror this
machine's apt uses, or the URLs in ENVGEN_DEBIAN_CONTENTS), reduced by the caller to the small map it needs,
and kept in the cache folder.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator

import httpx

from ...paths import cache_dir
from ...sandbox.images import DEFAULT_SUITE, SUITES, debian_mirror

CONTENTS_ENV = "ENVGEN_DEBIAN_CONTENTS"


def debian_arch() -> str:
    try:
        return subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        machine = platform.machine().lower()
        return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def contents_urls(suite: str = DEFAULT_SUITE) -> list[str]:
    """The Contents indexes to read: ENVGEN_DEBIAN_CONTENTS (URLs or paths, space-separated), else the suite's
    ``main`` indexes (this machine's architecture, and ``all``) on the mirror the base images use."""
    explicit = os.environ.get(CONTENTS_ENV, "").split()
    if explicit:
        return explicit
    mirror = debian_mirror(SUITES[suite])
    return [f"{mirror}/dists/{suite}/main/Contents-{arch}.gz" for arch in (debian_arch(), "all")]


def contents_lines(url: str) -> Iterator[str]:
    """The lines of one index (a URL, a path or a file:// URL; gzip-compressed or not)."""
    with tempfile.TemporaryFile() as tmp:
        if "://" not in url or url.startswith("file://"):
            with open(url.removeprefix("file://"), "rb") as src:
                shutil.copyfileobj(src, tmp)
        else:
            with httpx.stream("GET", url, follow_redirects=True, timeout=120) as resp:
                resp.raise_for_status()
                for chunk in resp.iter_bytes():
                    tmp.write(chunk)
        tmp.seek(0)
        head = tmp.read(2)
        tmp.seek(0)
        yield from io.TextIOWrapper(gzip.GzipFile(fileobj=tmp) if head == b"\x1f\x8b" else tmp, errors="replace")


def cached_index(name: str, urls: Iterable[str], reduce: Callable[[Iterator[str]], dict]) -> dict:
    """``reduce`` (every line of the indexes at ``urls`` -> a JSON-able map), computed once per machine and
    kept in the cache folder as ``name``; OSError naming the index when one cannot be read."""
    urls = list(urls)
    key = hashlib.sha256("\n".join(urls).encode()).hexdigest()[:16]
    path = cache_dir() / "debian-contents" / f"{name}{key}.json"
    if path.is_file():
        return json.loads(path.read_text())

    def lines() -> Iterator[str]:
        for url in urls:
            try:
                yield from contents_lines(url)
            except (OSError, httpx.HTTPError, EOFError, zlib.error) as e:
                raise OSError(f"Debian's Contents index {url} could not be read ({type(e).__name__}: {e})") from None

    out = reduce(lines())
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(out, sort_keys=True))
    tmp.replace(path)
    return out

"""A local stand-in for the Hugging Face Hub, so tests run the real ``huggingface_hub`` and ``datasets`` clients.

It speaks the subset of the Hub's HTTP API those clients use to create, commit to, list and download from a
repository: repo creation, info, tree listing, paths-info, refs and branches, YAML validation, the
agent-harness registry the client fetches for its user agent, preupload, the NDJSON commit endpoint, the
git-LFS batch API with basic PUT transfers, and ``resolve`` (HEAD/GET with Range). Storage is git-like:
repositories (by type and id) hold branches, tags and commits; a commit's tree maps paths to entries;
regular blobs are keyed by their git sha1 and LFS objects by their sha256. As on the Hub, a file goes to
LFS when .gitattributes says so, when it looks binary or when it is large; LFS files are served through a
second port playing the CDN, so ``resolve`` answers with the Hub's redirect and ``X-Linked-*`` headers and
the client takes its real code path.

Requests the server does not implement are answered 404 and recorded in ``unhandled`` (its own failures,
answered 500, in ``errors``), so a test can assert that the client needed nothing more. Xet storage is not
implemented: tests set ``HF_HUB_DISABLE_XET`` so LFS uploads use the classic batch API.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

GITATTRIBUTES = b"".join(
    f"{p} filter=lfs diff=lfs merge=lfs -text\n".encode() for p in ("*.parquet", "*.arrow", "*.db", "*.sqlite", "*.zip")
)
LFS_THRESHOLD = 10 * 1024 * 1024
"""Files at least this big go to LFS even when .gitattributes does not say so (as on the Hub)."""


def git_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


@dataclass
class Entry:
    """One file of a commit's tree."""

    size: int
    oid: str
    """git sha1 of the blob: the content, or the LFS pointer for LFS files."""
    lfs: str | None = None
    """sha256 of the content when the file lives in LFS."""


@dataclass
class Commit:
    oid: str
    parent: str | None
    title: str
    date: str
    tree: dict[str, Entry]


@dataclass
class Repo:
    type: str
    id: str
    private: bool
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    commits: dict[str, Commit] = field(default_factory=dict)


class HubError(Exception):
    """An HTTP error answer, with the X-Error-Code the client turns into its typed exceptions."""

    def __init__(self, status: int, message: str, code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.headers = status, message, code, headers or {}


class FakeHub:
    """The Hub's state and HTTP front. Use as a context manager; ``url`` is the endpoint for HF_ENDPOINT."""

    def __init__(self, tokens: dict[str, str] | None = None):
        self.tokens = tokens if tokens is not None else {"hf_write": "write", "hf_read": "read"}
        self.repos: dict[tuple[str, str], Repo] = {}
        self.blobs: dict[str, bytes] = {}
        self.lfs: dict[str, bytes] = {}
        self.requests: list[tuple[str, str]] = []
        self.unhandled: list[tuple[str, str]] = []
        self.errors: list[str] = []
        self.lock = threading.RLock()
        self._seq = 0
        self._servers = [ThreadingHTTPServer(("127.0.0.1", 0), _handler(self, cdn=False)),
                         ThreadingHTTPServer(("127.0.0.1", 0), _handler(self, cdn=True))]
        for s in self._servers:
            s.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._servers[0].server_port}"
        self.cdn_url = f"http://127.0.0.1:{self._servers[1].server_port}"

    def __enter__(self) -> FakeHub:
        for s in self._servers:
            threading.Thread(target=s.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        for s in self._servers:
            s.shutdown()
            s.server_close()

    # ------------------------------------------------------------------ helpers for tests

    def head(self, repo_id: str, branch: str = "main", repo_type: str = "dataset") -> str:
        return self.repos[(repo_type, repo_id)].branches[branch]

    def files(self, repo_id: str, revision: str = "main", repo_type: str = "dataset") -> dict[str, Entry]:
        repo = self.repos[(repo_type, repo_id)]
        return dict(repo.commits[self._resolve(repo, revision)].tree)

    def read(self, repo_id: str, path: str, revision: str = "main", repo_type: str = "dataset") -> bytes:
        return self._content(self.files(repo_id, revision, repo_type)[path])

    def corrupt(self, repo_id: str, path: str, data: bytes, revision: str = "main", repo_type: str = "dataset") -> None:
        """Replace a stored file's bytes in place, keeping its oid and ETag: storage or transit corruption."""
        entry = self.files(repo_id, revision, repo_type)[path]
        with self.lock:
            if entry.lfs:
                self.lfs[entry.lfs] = data
            else:
                self.blobs[entry.oid] = data

    def count(self, method: str, pattern: str) -> int:
        """How many requests matched, e.g. ``count("POST", r"/commit/")``."""
        return sum(1 for m, p in self.requests if m == method and re.search(pattern, p))

    # ------------------------------------------------------------------ storage

    def _content(self, entry: Entry) -> bytes:
        return self.lfs[entry.lfs] if entry.lfs else self.blobs[entry.oid]

    def _new_commit(self, repo: Repo, parent: str | None, title: str, tree: dict[str, Entry]) -> Commit:
        self._seq += 1
        oid = hashlib.sha1(f"{repo.id}\0{parent}\0{title}\0{self._seq}".encode()).hexdigest()
        date = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        commit = Commit(oid, parent, title, date, tree)
        repo.commits[oid] = commit
        return commit

    def _put_regular(self, data: bytes) -> Entry:
        oid = git_oid(data)
        self.blobs[oid] = data
        return Entry(len(data), oid)

    def _repo(self, repo_type: str, repo_id: str, token: str | None) -> Repo:
        repo = self.repos.get((repo_type, repo_id))
        if repo is None or (repo.private and token not in self.tokens):
            raise HubError(404, "Repository not found", "RepoNotFound")
        return repo

    @staticmethod
    def _resolve(repo: Repo, revision: str) -> str:
        if revision in repo.branches:
            return repo.branches[revision]
        if revision in repo.tags:
            return repo.tags[revision]
        if revision in repo.commits:
            return revision
        raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")

    def _is_lfs(self, tree: dict[str, Entry], path: str, size: int, sample: bytes) -> bool:
        attrs = self._content(tree[".gitattributes"]).decode() if ".gitattributes" in tree else ""
        patterns = [line.split()[0] for line in attrs.splitlines() if "filter=lfs" in line]
        name = path.rsplit("/", 1)[-1]
        return size >= LFS_THRESHOLD or b"\0" in sample or any(fnmatch.fnmatch(name, p) for p in patterns)

    @staticmethod
    def _tree_entry(path: str, e: Entry) -> dict:
        out = {"type": "file", "oid": e.oid, "size": e.size, "path": path}
        if e.lfs:
            out["lfs"] = {"oid": e.lfs, "size": e.size, "pointerSize": len(lfs_pointer(e.lfs, e.size))}
        return out

    @staticmethod
    def _folder_entry(path: str) -> dict:
        return {"type": "directory", "oid": hashlib.sha1(path.encode()).hexdigest(), "size": 0, "path": path}

    # ------------------------------------------------------------------ API

    def create_repo(self, body: dict, token: str | None) -> dict:
        self._need_write(token)
        repo_type = body.get("type") or "model"
        repo_id = f"{body['organization']}/{body['name']}" if body.get("organization") else body["name"]
        url = f"{self.url}/{'' if repo_type == 'model' else repo_type + 's/'}{repo_id}"
        if (repo_type, repo_id) in self.repos:
            raise HubError(409, "You already created this repo", headers={"X-Error-Message": "repo exists"})
        repo = Repo(repo_type, repo_id, private=body.get("visibility") == "private" or bool(body.get("private")))
        tree = {".gitattributes": self._put_regular(GITATTRIBUTES)}
        repo.branches["main"] = self._new_commit(repo, None, "initial commit", tree).oid
        self.repos[(repo_type, repo_id)] = repo
        return {"url": url, "name": repo_id, "id": repo_id}

    def info(self, repo: Repo, revision: str) -> dict:
        sha = self._resolve(repo, revision)
        commit = repo.commits[sha]
        return {"id": repo.id, "_id": hashlib.md5(repo.id.encode()).hexdigest()[:24], "author": repo.id.split("/")[0],
                "sha": sha, "private": repo.private, "gated": False, "disabled": False, "lastModified": commit.date,
                "tags": [], "downloads": 0, "likes": 0,
                "siblings": [{"rfilename": p} for p in sorted(commit.tree)]}

    def tree(self, repo: Repo, revision: str, path: str, recursive: bool) -> list[dict]:
        tree = repo.commits[self._resolve(repo, revision)].tree
        prefix = f"{path.strip('/')}/" if path.strip("/") else ""
        if prefix and not any(p.startswith(prefix) for p in tree):
            raise HubError(404, f"{path} does not exist", "EntryNotFound")
        out, folders = [], set()
        for p in sorted(tree):
            if not p.startswith(prefix):
                continue
            rest = p[len(prefix):].split("/")
            for depth in range(1, len(rest) if recursive else min(len(rest), 2)):
                folders.add(prefix + "/".join(rest[:depth]))
            if recursive or len(rest) == 1:
                out.append(self._tree_entry(p, tree[p]))
        return [self._folder_entry(f) for f in sorted(folders)] + out

    def paths_info(self, repo: Repo, revision: str, paths: list[str]) -> list[dict]:
        tree = repo.commits[self._resolve(repo, revision)].tree
        out = []
        for p in paths:
            p = p.strip("/")
            if p in tree:
                out.append(self._tree_entry(p, tree[p]))
            elif any(q.startswith(p + "/") for q in tree):
                out.append(self._folder_entry(p))
        return out

    def preupload(self, repo: Repo, revision: str, body: dict, token: str | None) -> dict:
        self._need_write(token)
        sha = self._resolve(repo, revision)
        tree = repo.commits[sha].tree
        files = []
        for f in body["files"]:
            lfs = self._is_lfs(tree, f["path"], f["size"], base64.b64decode(f["sample"]))
            old = tree.get(f["path"])
            oid = None if old is None else (old.lfs if old.lfs else old.oid)
            files.append({"path": f["path"], "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False,
                          "oid": oid})
        return {"files": files, "commitOid": sha}

    def lfs_batch(self, repo: Repo, body: dict, token: str | None) -> dict:
        self._need_write(token)
        if body.get("operation") != "upload":
            raise HubError(400, "only uploads are supported")
        objects = []
        for o in body["objects"]:
            item = {"oid": o["oid"], "size": o["size"], "authenticated": True}
            if o["oid"] not in self.lfs:
                item["actions"] = {"upload": {"href": f"{self.url}/_lfs/{o['oid']}", "header": {}}}
            objects.append(item)
        return {"transfer": "basic", "objects": objects}

    def lfs_put(self, oid: str, data: bytes) -> None:
        if hashlib.sha256(data).hexdigest() != oid:
            raise HubError(400, "sha256 of the body does not match the object id")
        self.lfs[oid] = data

    def commit(self, repo: Repo, revision: str, lines: list[dict], token: str | None, params: dict) -> dict:
        self._need_write(token)
        if params.get("create_pr"):
            raise HubError(400, "pull requests are not supported by this test server")
        if revision not in repo.branches:
            raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        head = repo.branches[revision]
        header = next(item["value"] for item in lines if item["key"] == "header")
        if header.get("parentCommit") and header["parentCommit"] != head:
            raise HubError(412, "A commit has happened since. Please refresh and try again.")
        tree = dict(repo.commits[head].tree)
        for item in lines:
            key, v = item["key"], item["value"]
            if key == "file":
                tree[v["path"]] = self._put_regular(base64.b64decode(v["content"]))
            elif key == "lfsFile":
                if v["oid"] not in self.lfs:
                    raise HubError(422, f"LFS object {v['oid']} of {v['path']} was never uploaded")
                pointer = lfs_pointer(v["oid"], len(self.lfs[v["oid"]]))
                self.blobs[git_oid(pointer)] = pointer
                tree[v["path"]] = Entry(len(self.lfs[v["oid"]]), git_oid(pointer), v["oid"])
            elif key == "deletedFile":
                if tree.pop(v["path"], None) is None:
                    raise HubError(404, "A file with this name doesn't exist", "EntryNotFound")
            elif key == "deletedFolder":
                for p in [p for p in tree if p.startswith(v["path"].rstrip("/") + "/")]:
                    del tree[p]
            elif key != "header":
                raise HubError(400, f"unknown commit operation {key!r}")
        commit = self._new_commit(repo, head, header["summary"], tree)
        repo.branches[revision] = commit.oid
        prefix = "" if repo.type == "model" else f"{repo.type}s/"
        return {"success": True, "commitOid": commit.oid, "hookOutput": "", "pullRequestUrl": None,
                "commitUrl": f"{self.url}/{prefix}{repo.id}/commit/{commit.oid}"}

    def create_branch(self, repo: Repo, branch: str, body: dict, token: str | None) -> dict:
        self._need_write(token)
        if branch in repo.branches:
            raise HubError(409, f"Reference refs/heads/{branch} already exists")
        repo.branches[branch] = self._resolve(repo, body.get("startingPoint") or "main")
        return {}

    def refs(self, repo: Repo) -> dict:
        ref = lambda kind, name, oid: {"name": name, "ref": f"refs/{kind}/{name}", "targetCommit": oid}  # noqa: E731
        return {"branches": [ref("heads", n, o) for n, o in repo.branches.items()],
                "tags": [ref("tags", n, o) for n, o in repo.tags.items()], "converts": []}

    @staticmethod
    def validate_yaml(body: dict) -> tuple[int, dict]:
        m = re.match(r"^---\s*\n(.*?)\n---\s*\n", body.get("content", ""), re.S)
        try:
            meta = yaml.safe_load(m.group(1)) if m else {}
        except yaml.YAMLError as e:
            return 400, {"errors": [{"message": f"invalid YAML: {e}"}], "warnings": []}
        if meta is not None and not isinstance(meta, dict):
            return 400, {"errors": [{"message": "metadata must be a mapping"}], "warnings": []}
        return 200, {"errors": [], "warnings": []}

    def _need_write(self, token: str | None) -> None:
        if self.tokens.get(token or "") != "write":
            raise HubError(401, "Invalid credentials in Authorization header",
                           headers={"X-Error-Message": "Invalid credentials in Authorization header"})


# ---------------------------------------------------------------------- HTTP

_TYPES = r"(?P<type>model|dataset|space)s"
_REPO = r"(?P<repo>[^/]+/[^/]+)"
_API_ROUTES = [
    ("POST", r"/api/repos/create", "create"),
    ("GET", rf"/api/{_TYPES}/{_REPO}(?:/revision/(?P<rev>[^/]+))?", "info"),
    ("GET", rf"/api/{_TYPES}/{_REPO}/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?", "tree"),
    ("POST", rf"/api/{_TYPES}/{_REPO}/paths-info/(?P<rev>[^/]+)", "paths_info"),
    ("POST", rf"/api/{_TYPES}/{_REPO}/preupload/(?P<rev>[^/]+)", "preupload"),
    ("POST", rf"/api/{_TYPES}/{_REPO}/commit/(?P<rev>[^/]+)", "commit"),
    ("POST", rf"/api/{_TYPES}/{_REPO}/branch/(?P<rev>[^/]+)", "branch"),
    ("GET", rf"/api/{_TYPES}/{_REPO}/refs", "refs"),
    ("POST", r"/api/validate-yaml", "validate_yaml"),
    ("GET", r"/api/agent-harnesses", "agent_harnesses"),
    ("POST", r"/(?:(?P<type>dataset|space)s/)?(?P<repo>[^/]+/[^/]+)\.git/info/lfs/objects/batch", "lfs_batch"),
    ("PUT", r"/_lfs/(?P<oid>[0-9a-f]{64})", "lfs_put"),
    ("HEAD", r"/(?:(?P<type>dataset|space)s/)?(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)", "resolve"),
    ("GET", r"/(?:(?P<type>dataset|space)s/)?(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)", "resolve"),
]


def _handler(hub: FakeHub, cdn: bool) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # keep test output clean
            pass

        def do_GET(self) -> None:
            self._dispatch("GET")

        def do_HEAD(self) -> None:
            self._dispatch("HEAD")

        def do_POST(self) -> None:
            self._dispatch("POST")

        def do_PUT(self) -> None:
            self._dispatch("PUT")

        # -------------------------------------------------------------- plumbing

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        self.rfile.readline()
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _token(self) -> str | None:
            auth = self.headers.get("Authorization", "")
            return auth[7:] if auth.lower().startswith("bearer ") else None

        def _send(self, status: int, body: bytes = b"", headers: dict | None = None, method: str = "GET") -> None:
            self.send_response(status)
            headers = {"Content-Type": "application/json", **(headers or {})}
            headers.setdefault("Content-Length", str(len(body)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            if method != "HEAD" and body:
                self.wfile.write(body)

        def _json(self, obj, status: int = 200) -> None:
            self._send(status, json.dumps(obj).encode())

        def _error(self, e: HubError, method: str) -> None:
            headers = dict(e.headers)
            if e.code:
                headers["X-Error-Code"] = e.code
            headers.setdefault("X-Error-Message", e.message)
            self._send(e.status, json.dumps({"error": e.message}).encode(), headers, method)

        def _dispatch(self, method: str) -> None:
            raw = urlsplit(self.path)
            hub.requests.append((method, raw.path))
            try:
                if cdn:
                    return self._cdn(method, raw.path)
                for m, pattern, name in _API_ROUTES:
                    match = re.fullmatch(pattern, raw.path) if m == method else None
                    if match:
                        with hub.lock:
                            return getattr(self, f"_{name}")(method, match, parse_qs(raw.query))
                hub.unhandled.append((method, self.path))
                raise HubError(404, f"not implemented by the test hub: {method} {raw.path}")
            except HubError as e:
                self._error(e, method)
            except Exception as e:  # a bug in this server: answer 500 and keep it for the test to see
                hub.errors.append(f"{method} {self.path}: {type(e).__name__}: {e}")
                self._error(HubError(500, f"test hub failed: {e}"), method)

        def _repo(self, match) -> Repo:
            return hub._repo(match.group("type") or "model", unquote(match.group("repo")), self._token())

        # -------------------------------------------------------------- routes

        def _create(self, method, match, query) -> None:
            self._json(hub.create_repo(json.loads(self._body()), self._token()))

        def _info(self, method, match, query) -> None:
            self._json(hub.info(self._repo(match), unquote(match.group("rev") or "main")))

        def _tree(self, method, match, query) -> None:
            recursive = query.get("recursive", ["False"])[0].lower() in ("true", "1")
            self._json(hub.tree(self._repo(match), unquote(match.group("rev")), unquote(match.group("path") or ""),
                                recursive))

        def _paths_info(self, method, match, query) -> None:
            form = parse_qs(self._body().decode())
            self._json(hub.paths_info(self._repo(match), unquote(match.group("rev")), form.get("paths", [])))

        def _preupload(self, method, match, query) -> None:
            self._json(hub.preupload(self._repo(match), unquote(match.group("rev")), json.loads(self._body()),
                                     self._token()))

        def _commit(self, method, match, query) -> None:
            lines = [json.loads(line) for line in self._body().splitlines() if line.strip()]
            params = {k: v[0] for k, v in query.items()}
            self._json(hub.commit(self._repo(match), unquote(match.group("rev")), lines, self._token(), params))

        def _branch(self, method, match, query) -> None:
            body = self._body()
            self._json(hub.create_branch(self._repo(match), unquote(match.group("rev")),
                                         json.loads(body) if body else {}, self._token()))

        def _refs(self, method, match, query) -> None:
            self._json(hub.refs(self._repo(match)))

        def _validate_yaml(self, method, match, query) -> None:
            status, out = hub.validate_yaml(json.loads(self._body()))
            self._json(out, status)

        def _agent_harnesses(self, method, match, query) -> None:  # the client's telemetry registry: empty
            self._json({"standardEnvVars": [], "harnesses": {}})

        def _lfs_batch(self, method, match, query) -> None:
            out = hub.lfs_batch(self._repo(match), json.loads(self._body()), self._token())
            self._send(200, json.dumps(out).encode(), {"Content-Type": "application/vnd.git-lfs+json"})

        def _lfs_put(self, method, match, query) -> None:
            hub.lfs_put(match.group("oid"), self._body())
            self._send(200)

        def _resolve(self, method, match, query) -> None:
            repo = self._repo(match)
            sha = hub._resolve(repo, unquote(match.group("rev")))
            path = unquote(match.group("path"))
            entry = repo.commits[sha].tree.get(path)
            if entry is None:
                raise HubError(404, f"{path} does not exist", "EntryNotFound", {"X-Repo-Commit": sha})
            headers = {"X-Repo-Commit": sha, "ETag": f'"{entry.oid}"', "Accept-Ranges": "bytes"}
            if entry.lfs:  # redirect to the CDN, carrying the linked object's metadata, as the Hub does
                headers.update({"Location": f"{hub.cdn_url}/{entry.lfs}", "X-Linked-Etag": f'"{entry.lfs}"',
                                "X-Linked-Size": str(entry.size)})
                return self._send(302, b"", headers, method)
            self._serve(method, hub._content(entry), headers)

        def _cdn(self, method: str, path: str) -> None:
            oid = path.strip("/")
            if method not in ("GET", "HEAD") or oid not in hub.lfs:
                raise HubError(404, "no such object")
            self._serve(method, hub.lfs[oid], {"ETag": f'"{oid}"', "Accept-Ranges": "bytes"})

        def _serve(self, method: str, data: bytes, headers: dict) -> None:
            headers = {**headers, "Content-Type": "application/octet-stream"}
            m = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", ""))
            if m and data:
                start = int(m.group(1)) if m.group(1) else max(len(data) - int(m.group(2)), 0)
                end = int(m.group(2)) if m.group(1) and m.group(2) else len(data) - 1
                end = min(end, len(data) - 1)
                if start > end:
                    return self._send(416, b"", {**headers, "Content-Range": f"bytes */{len(data)}"}, method)
                headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
                return self._send(206, data[start:end + 1], headers, method)
            self._send(200, data, headers, method)

    return Handler

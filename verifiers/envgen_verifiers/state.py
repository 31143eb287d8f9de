"""DB-state verification: the whole end database against the expected one, plus task-specific queries.

A task that changes state is judged on everything the episode did to its database, not only on the rows
the task is about: renewing someone else's loan, charging a fine nobody asked for or adding a table must
score 0 even when the task's own rows are right.

**Change set.** ``changeset(before, after)`` is a canonical, JSON-ready description of how one SQLite
database differs from another:

    {"schema": [{"object": "table audit", "before": null, "after": "CREATE TABLE audit (...)"}, ...],
     "tables": {"loans": {"key": ["id"], "added": [row, ...], "removed": [row, ...],
                          "changed": [{"key": ["LN-0007"], "before": {"due": ...}, "after": {"due": ...}}]}}}

- rows are matched by primary key; a table without one (or whose key holds NULLs or duplicates) is a
  multiset of rows, since its rowid is not data (VACUUM renumbers it, delete + re-insert changes it);
- ids the database assigns (an ``INTEGER PRIMARY KEY`` of an added row) are left out of added rows, so
  inserting the same rows in another order is the same change; values that reference them still count;
- values keep their SQLite type (text "1" is not integer 1; blobs are ``{"blob": HEX}``), except that a
  float is rounded to 12 significant digits and an integral float equals the integer (3.0 == 3);
- ``schema`` lists every table, view, trigger and index whose SQL differs (``sqlite_*`` internals such
  as ``sqlite_sequence`` are not compared), and ``pragma user_version``;
- only the net change counts: a row written and then restored is no change.

**Whole-database check** (``whole_db``), declared in a verifier's args as ``changes``::

    "changes": {"db": "state/library.db",            (state kind: defaults to args["db"])
                "ignore": ["audit_log.*", "*.updated_at"],   (fnmatch over "table.column", case-insensitive:
                                                      volatile columns a tool writes on every call)
                "expected": {...}}                   (the change set the reference makes)

The build records ``expected`` by replaying the task's reference in a sandbox: the check always reports
the change set it saw (``details["changes"]["actual"]``, or its digest and counts when large), and the
build stores that. At verify time the actual change set must equal the expected one, and the details
name the first rows that differ. A check without ``expected`` fails (reward 0, ``error`` in the
details): it never passes by default. ``"report": true`` (program kind only) measures without judging;
the red-team gate uses it to see what a trajectory changed.

**Replay mode** (``"changes": {"replay": true, "ignore": [...]}``): instead of a recorded ``expected``,
the verifier replays the task's reference (which reaches the verifier, never the agent) on a fresh copy
of the pristine env dir, in a forked child that runs the pack's tools as the runtime does (the verifier
process itself never runs tool code), and requires the agent's end database to equal the reference's end
database: every table, every row, the schema. Nothing is hand-listed and nothing is recorded at build
time, so a task written by hand is judged on its whole end state; ``details["changes"]`` still reports the
episode's change set against the pristine database (the red-team gate reads it).

**No write** (kind ``no_write``, args ``db`` or ``dbs``, ``ignore``): outcome tasks whose right outcome
changes nothing (refuse, transfer, answer a question): every listed database must equal the pristine one.

**JSON state** (``{"json": "state/db.json"}`` instead of ``db``, in both kinds; ``no_write`` also takes
``jsons``): a domain whose state is one JSON document (tau2-bench's databases) is judged the same way, on the
parsed document, not its bytes: object keys in any order, whitespace and number spelling (``1.10``, ``1.1``,
``11e-1``) do not count; a float is rounded to 12 significant digits and an integral float equals the
integer; ``true`` is not ``1`` and ``"1"`` is not ``1``; list order counts. The change set is the list of
leaves that differ, each ``{"path": JSON pointer, "before", "after"}`` (``{"absent": true}`` where a key is
missing), sorted by path; ``ignore`` holds fnmatch patterns over the pointers (``/orders/*/updated_at``).
Replay mode replays the reference as above and requires the episode's end document to equal the
reference's; ``expected`` (a recorded change list) works as for SQLite.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import math
import os
import pathlib
import shutil
import signal
import sqlite3
import sys
import tempfile
from collections import Counter

INLINE_LIMIT = 8000
"""Largest change set (JSON characters) reported in full; a larger one is reported as digest + counts."""
MAX_DIFFERENCES = 5
_SHADOW_SUFFIXES = ("_data", "_idx", "_content", "_docsize", "_config", "_segments", "_segdir", "_stat", "_node",
                    "_parent", "_rowid")
"""Shadow tables of FTS3/4/5 and R*Tree virtual tables: their layout depends on history, their content is
compared through the virtual table itself."""
_ABSENT = {"absent": True}


class StateError(Exception):
    """The database cannot be read as a change set (missing, corrupt, unreadable)."""


# ------------------------------------------------------------------ canonical values


def _value(v):
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        if math.isinf(v):
            return {"real": "inf" if v > 0 else "-inf"}
        if math.isnan(v):
            return None  # SQLite stores NaN as NULL
        v = float(f"{v:.12g}")
        return int(v) if v.is_integer() and abs(v) < 2 ** 53 else v
    if isinstance(v, (bytes, bytearray, memoryview)):
        return {"blob": bytes(v).hex()}
    return {"other": repr(v)}


def _dumps(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def digest(changes: dict) -> str:
    """A stable fingerprint of a change set (equal change sets, equal digests)."""
    return "sha256:" + hashlib.sha256(_dumps(changes).encode()).hexdigest()


# ------------------------------------------------------------------ reading the databases


def _uri(path: str, pristine: bool) -> str:
    if not os.path.isfile(path):
        raise StateError(f"database {path} is missing")
    return pathlib.Path(os.path.abspath(path)).as_uri() + ("?mode=ro&immutable=1" if pristine else "?mode=ro")


def _connect(before: str, after: str) -> sqlite3.Connection:
    """One read-only connection: the end database as ``main``, the pristine one attached as ``p``."""
    con = sqlite3.connect(_uri(after, False), uri=True)
    try:
        con.execute("PRAGMA temp_store = MEMORY")  # EXCEPT's scratch b-trees: the sandbox's /tmp may be tiny
        con.execute("SELECT count(*) FROM main.sqlite_master").fetchone()
    except sqlite3.DatabaseError as e:
        con.close()
        raise StateError(f"database {after} cannot be read: {e}") from None
    try:
        con.execute("ATTACH DATABASE ? AS p", (_uri(before, True),))
        con.execute("SELECT count(*) FROM p.sqlite_master").fetchone()
    except sqlite3.DatabaseError as e:
        con.close()
        raise StateError(f"database {before} cannot be read: {e}") from None
    except StateError:
        con.close()
        raise
    return con


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _fetch(con: sqlite3.Connection, sql: str) -> list:
    try:
        return con.execute(sql).fetchall()
    except sqlite3.OperationalError as e:  # text that is not UTF-8: read it escaped, still comparable
        if "decode" not in str(e):
            raise
        con.text_factory = lambda b: b.decode("utf-8", "backslashreplace")
        try:
            return con.execute(sql).fetchall()
        finally:
            con.text_factory = str


class _Table:
    """One table of one database (``main`` or ``p``): columns and key; rows read when needed."""

    def __init__(self, con: sqlite3.Connection, db: str, name: str, sql: str, virtual: bool):
        self.con, self.db, self.name, self.virtual = con, db, name, virtual
        self.collates = "COLLATE" in sql.upper()
        """Some column may compare text with a collation other than BINARY (NOCASE would hide 'a' -> 'A')."""
        self.ref = f"{db}.{_q(name)}"
        info = con.execute(f"PRAGMA {db}.table_info({_q(name)})").fetchall()
        self.columns = [r[1] for r in info]
        self.pk = [r[1] for r in sorted((r for r in info if r[5]), key=lambda r: r[5])]
        lower = {c.lower() for c in self.columns}
        alias = next((a for a in ("rowid", "_rowid_", "oid") if a not in lower), None)
        has_rowid = False
        if alias is not None:
            try:
                con.execute(f"SELECT {alias} FROM {self.ref} LIMIT 1").fetchall()
                has_rowid = True
            except sqlite3.OperationalError:
                pass
        types = {r[1]: (r[2] or "").strip().upper() for r in info}
        self.auto = (not virtual and has_rowid and len(self.pk) == 1 and types[self.pk[0]] == "INTEGER")
        """The key is an INTEGER PRIMARY KEY: the database assigns it to inserted rows."""
        if self.columns:
            con.execute(f"SELECT * FROM {self.ref} LIMIT 1").fetchall()  # unreadable (e.g. no module): fail now
        self._rows = None

    @property
    def rows(self) -> list:
        if self._rows is None:
            cols = ", ".join(_q(c) for c in self.columns)
            self._rows = _fetch(self.con, f"SELECT {cols} FROM {self.ref}") if self.columns else []
        return self._rows

    def null_key(self) -> bool:
        cond = " OR ".join(f"{_q(c)} IS NULL" for c in self.pk)
        return self.con.execute(f"SELECT 1 FROM {self.ref} WHERE {cond} LIMIT 1").fetchone() is not None


def _read(con: sqlite3.Connection, db: str) -> tuple[dict, dict, dict]:
    """(schema objects {"type name": sql}, pragmas, tables {name: _Table}) of database ``db``."""
    master = con.execute(f"SELECT type, name, sql FROM {db}.sqlite_master ORDER BY type, name").fetchall()
    objects, tables, virtual = {}, [], set()
    for type_, name, sql in master:
        if name.lower().startswith("sqlite_"):
            continue
        text = " ".join((sql or "").split())
        objects[f"{type_} {name}"] = text
        if type_ == "table":
            tables.append(name)
            if text.upper().startswith("CREATE VIRTUAL TABLE"):
                virtual.add(name)
    out, readable = {}, set()
    for name in sorted(virtual):
        try:
            out[name] = _Table(con, db, name, objects[f"table {name}"], True)
            readable.add(name.lower())
        except sqlite3.OperationalError:  # module not available here: compare its shadow tables instead
            pass
    for name in tables:
        if name in virtual:
            continue
        low = name.lower()
        if any(low == v + s for v in readable for s in _SHADOW_SUFFIXES):
            continue
        try:
            out[name] = _Table(con, db, name, objects[f"table {name}"], False)
        except sqlite3.DatabaseError as e:
            raise StateError(f"table {name} cannot be read: {e}") from None
    pragmas = {"user_version": con.execute(f"PRAGMA {db}.user_version").fetchone()[0]}
    return objects, pragmas, out


# ------------------------------------------------------------------ the change set


def _ignored(patterns) -> callable:
    pats = [str(p).lower() for p in patterns or ()]
    return lambda table, column: any(fnmatch.fnmatchcase(f"{table}.{column}".lower(), p) for p in pats)


def _row(raw: tuple, keep: list) -> dict:
    return {c: _value(raw[i]) for i, c in keep}


def _keyed(table: _Table, rows: list) -> dict | None:
    """{key tuple: raw row} when the table has a primary key that identifies every row; else None."""
    if not table.pk:
        return None
    idx = [table.columns.index(c) for c in table.pk]
    out = {}
    for raw in rows:
        key = tuple(raw[i] for i in idx)
        if any(k is None for k in key) or key in out:
            return None
        out[key] = raw
    return out


def _candidates(before: _Table, after: _Table) -> tuple[list, list] | None:
    """(old rows, new rows) of the rows that differ, found by SQLite (EXCEPT, binary collation) without
    reading the table into Python; None when the table needs the full comparison (no key, a NULL key, a
    changed shape, a virtual table)."""
    if before.virtual or after.virtual or not before.pk or before.pk != after.pk or before.columns != after.columns \
            or before.null_key() or after.null_key():
        return None
    binary = " COLLATE BINARY" if before.collates or after.collates else ""  # keeps SQLite's fast path otherwise
    sel = ", ".join(_q(c) + binary for c in before.columns)
    con = after.con
    new = _fetch(con, f"SELECT {sel} FROM {after.ref} EXCEPT SELECT {sel} FROM {before.ref}")
    old = _fetch(con, f"SELECT {sel} FROM {before.ref} EXCEPT SELECT {sel} FROM {after.ref}")
    return old, new


def _diff_table(name: str, before: _Table | None, after: _Table | None, ignored) -> dict | None:
    ref = after or before
    keep_b = [(i, c) for i, c in enumerate(before.columns) if not ignored(name, c)] if before else []
    keep_a = [(i, c) for i, c in enumerate(after.columns) if not ignored(name, c)] if after else []
    if before is not None and after is not None and not keep_b and not keep_a:
        return None  # every column is volatile
    quick = _candidates(before, after) if before is not None and after is not None else None
    if quick is not None:  # primary keys are unique and not NULL here: the differing rows say it all
        kb, ka = _keyed(before, quick[0]), _keyed(after, quick[1])
    else:
        if before is not None and after is not None and before.columns == after.columns and \
                before.pk == after.pk and before.rows == after.rows:
            return None
        same_key = before is None or after is None or before.pk == after.pk
        kb = _keyed(before, before.rows) if before is not None else {}
        ka = _keyed(after, after.rows) if after is not None else {}
        if not same_key:
            kb = ka = None
    added, removed, changed = [], [], []
    if ref.pk and kb is not None and ka is not None:
        for key, raw in kb.items():
            if key not in ka:
                removed.append(_row(raw, keep_b))
        for key, raw in ka.items():
            old = kb.get(key)
            if old is None:
                row = _row(raw, keep_a)
                if ref.auto:
                    row.pop(ref.pk[0], None)
                added.append(row)
            elif old != raw or keep_a != keep_b:
                rb, ra = _row(old, keep_b), _row(raw, keep_a)
                cols = sorted(set(rb) | set(ra))
                diff = [c for c in cols if _dumps(rb.get(c, _ABSENT)) != _dumps(ra.get(c, _ABSENT))]
                if diff:
                    changed.append({"key": [_value(k) for k in key],
                                    "before": {c: rb.get(c, _ABSENT) for c in diff},
                                    "after": {c: ra.get(c, _ABSENT) for c in diff}})
        key = list(ref.pk)
    else:  # no usable key: the table is a multiset of rows
        cb = Counter(_dumps(_row(r, keep_b)) for r in before.rows) if before else Counter()
        ca = Counter(_dumps(_row(r, keep_a)) for r in after.rows) if after else Counter()
        removed = [json.loads(s) for s in (cb - ca).elements()]
        added = [json.loads(s) for s in (ca - cb).elements()]
        key = []
    if not (added or removed or changed):
        return None
    return {"key": key, "added": sorted(added, key=_dumps), "removed": sorted(removed, key=_dumps),
            "changed": sorted(changed, key=lambda c: _dumps(c["key"]))}


def _same_file(before: str, after: str) -> bool:
    """Byte-identical files with no write-ahead log beside the second: nothing changed (the common case of
    an episode that only read)."""
    try:
        if os.path.exists(after + "-wal") and os.path.getsize(after + "-wal") > 0:
            return False
        if os.path.getsize(before) != os.path.getsize(after):
            return False
        with open(before, "rb") as x, open(after, "rb") as y:
            while True:
                a, b = x.read(1 << 20), y.read(1 << 20)
                if a != b:
                    return False
                if not a:
                    return True
    except OSError:
        return False


def changeset(before: str, after: str, ignore=()) -> dict:
    """How the database at ``after`` differs from the one at ``before`` (see the module docstring).

    Raises StateError when either cannot be read.
    """
    if _same_file(before, after):
        return {"schema": [], "tables": {}}
    ignored = _ignored(ignore)
    con = _connect(before, after)
    try:
        try:
            ob, pb, tb = _read(con, "p")
            oa, pa, ta = _read(con, "main")
            tables = {}
            for name in sorted(set(tb) | set(ta)):
                d = _diff_table(name, tb.get(name), ta.get(name), ignored)
                if d is not None:
                    tables[name] = d
        except sqlite3.DatabaseError as e:
            raise StateError(f"database cannot be read: {e}") from None
    finally:
        con.close()
    schema = [{"object": k, "before": ob.get(k), "after": oa.get(k)} for k in sorted(set(ob) | set(oa))
              if ob.get(k) != oa.get(k)]
    schema += [{"object": f"pragma {k}", "before": pb[k], "after": pa[k]} for k in sorted(pb) if pb[k] != pa[k]]
    return {"schema": schema, "tables": tables}


def summary(changes: dict) -> dict:
    """Counts of a change set: schema objects, and rows added/removed/changed per table."""
    return {"schema": len(changes.get("schema", [])),
            "tables": {t: {k: len(v[k]) for k in ("added", "removed", "changed")}
                       for t, v in changes.get("tables", {}).items()}}


# ------------------------------------------------------------------ explaining a mismatch


def _clip(text: str, n: int = 240) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def _cols(d: dict) -> str:
    return ", ".join(f"{c}={_dumps(v)}" for c, v in sorted(d.items()))


def _schema_change(o: dict | None) -> str:
    if o is None:
        return "no change"
    if o["before"] is None:
        return f"created ({_dumps(o['after'])})"
    if o["after"] is None:
        return "dropped"
    return f"{_dumps(o['before'])} -> {_dumps(o['after'])}"


def differences(expected: dict, actual: dict, limit: int = MAX_DIFFERENCES) -> list[str]:
    """The first ``limit`` ways ``actual`` departs from ``expected``, one readable line each."""
    out: list[str] = []
    es = {o["object"]: o for o in expected.get("schema", [])}
    acts = {o["object"]: o for o in actual.get("schema", [])}
    for obj in sorted(set(es) | set(acts)):
        e, a = es.get(obj), acts.get(obj)
        if e != a:
            out.append(_clip(f"schema {obj}: expected {_schema_change(e)}, got {_schema_change(a)}"))
    et, at = expected.get("tables", {}), actual.get("tables", {})
    for table in sorted(set(et) | set(at)):
        e, a = et.get(table, {}), at.get(table, {})
        key = a.get("key") or e.get("key") or []
        for part, verb in (("removed", "deleted"), ("added", "inserted")):
            ce = Counter(_dumps(r) for r in e.get(part, []))
            ca = Counter(_dumps(r) for r in a.get(part, []))
            out += [_clip(f"{table}: row {r} was {verb}, the task does not do that")
                    for r in sorted((ca - ce).elements())]
            out += [_clip(f"{table}: row {r} should have been {verb}") for r in sorted((ce - ca).elements())]
        ce = {_dumps(c["key"]): c for c in e.get("changed", [])}
        ca = {_dumps(c["key"]): c for c in a.get("changed", [])}
        for k in sorted(set(ce) | set(ca)):
            name = ", ".join(f"{c}={_dumps(v)}" for c, v in zip(key, json.loads(k))) or k
            if k not in ce:
                c = ca[k]
                out.append(_clip(f"{table} {name}: changed ({_cols(c['before'])} -> {_cols(c['after'])}), the task "
                                 "does not change it"))
            elif k not in ca:
                c = ce[k]
                out.append(_clip(f"{table} {name}: should have changed ({_cols(c['before'])} -> "
                                 f"{_cols(c['after'])})"))
            elif _dumps(ce[k]) != _dumps(ca[k]):
                out.append(_clip(f"{table} {name}: expected {_cols(ce[k]['after'])}, got {_cols(ca[k]['after'])} "
                                 f"(was {_cols(ca[k]['before'])})"))
    return out[:limit]


# ------------------------------------------------------------------ the whole-database check


def _under(root: str, rel: str, what: str) -> str:
    path = os.path.normpath(os.path.join(root, rel))
    if not path.startswith(os.path.normpath(root) + os.sep):
        raise ValueError(f"db path {rel!r} leaves the {what}")
    return path


def replay_reference(env_dir: str, calls: list) -> tuple[str, list[str]]:
    """A temp dir holding a copy of the pristine env dir after the reference's ``calls`` ran in it, and the
    calls that raised (as the runtime, a raising call leaves what it wrote and the replay goes on).

    The tools run in a forked child (the verifier process never imports tool code), loaded from
    ``env_dir/tools.py`` with the copy as the current directory, as the runtime loads them. The caller
    removes the dir (``shutil.rmtree(os.path.dirname(work))``)."""
    tmp = tempfile.mkdtemp(prefix="envgen-replay-")
    work = os.path.join(tmp, "work")
    shutil.copytree(env_dir, work, ignore=shutil.ignore_patterns("__pycache__", "Dockerfile"))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run the tools, report, exit without running the parent's cleanup
        status: dict = {"failed": []}
        try:
            os.close(r)
            import importlib.util

            sys.dont_write_bytecode = True
            os.chdir(work)
            path = os.path.join(env_dir, "tools.py")
            module = None
            if os.path.isfile(path):
                spec = importlib.util.spec_from_file_location("tools", path)
                module = importlib.util.module_from_spec(spec)
                sys.modules["tools"] = module
                spec.loader.exec_module(module)
            for i, c in enumerate(calls):
                name = str(c.get("tool"))
                fn = getattr(module, name, None) if not name.startswith("_") else None
                if not callable(fn):
                    status["failed"].append(f"reference call {i}: no tool {name!r}")
                    continue
                try:
                    fn(**(c.get("args") or {}))
                except Exception as e:
                    status["failed"].append(f"reference call {i} ({name}) raised {type(e).__name__}: {e}"[:300])
        except BaseException as e:
            status["error"] = f"the reference could not be replayed: {type(e).__name__}: {e}"[:500]
        finally:
            try:
                os.write(w, json.dumps(status).encode("utf-8")[:60000])
            finally:
                os._exit(0)
    os.close(w)
    chunks = []
    try:
        with os.fdopen(r, "rb") as f:
            while True:
                b = f.read(65536)
                if not b:
                    break
                chunks.append(b)
        os.waitpid(pid, 0)
        pid = 0
    finally:
        if pid:  # interrupted (the verifier's timeout): the child must not outlive us
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass
            shutil.rmtree(tmp, ignore_errors=True)
    try:
        status = json.loads(b"".join(chunks).decode("utf-8"))
    except ValueError:
        status = {"error": "the reference replay died without a report"}
    if status.get("error"):
        shutil.rmtree(tmp, ignore_errors=True)
        raise StateError(status["error"])
    return work, list(status.get("failed") or [])


def whole_db(spec: dict, *, work_dir: str, env_dir: str | None, enforce: bool = True,
             reference: dict | None = None) -> dict:
    """Compare the work dir's database with the pristine one (``spec``: db, ignore, expected | replay).

    Returns ``{"ok": bool, "digest", "summary", "actual", ...}``; ``ok`` is False when the change set
    differs from ``expected`` (or, with ``replay``, when the end database differs from the reference's end
    database), when there is no expectation (unless ``enforce`` is False: report only), or when a database
    cannot be read (``error`` says which).
    """
    rel = spec.get("db")
    if not isinstance(rel, str) or not rel:
        raise ValueError("changes needs the database path (db) relative to the work dir")
    out: dict = {"db": rel}
    if not env_dir:
        return {**out, "ok": False, "error": "no pristine env dir to compare the database with"}
    try:
        end = _under(work_dir, rel, "work dir")
        actual = changeset(_under(env_dir, rel, "env dir"), end, spec.get("ignore"))
    except StateError as e:
        return {**out, "ok": False, "error": str(e)}
    d = digest(actual)
    inline = len(_dumps(actual)) <= INLINE_LIMIT
    out.update(digest=d, summary=summary(actual),
               actual=actual if inline else {"digest": d, "summary": summary(actual)})
    if not enforce:
        return {**out, "ok": True, "report": True}
    if spec.get("replay"):
        return _against_reference(out, spec, rel, end, env_dir, reference)
    expected = spec.get("expected")
    if not isinstance(expected, dict):
        return {**out, "ok": False, "error": "no expected change set was recorded for this task (the build records "
                                             "it by replaying the reference); refusing to pass by default"}
    full = "tables" in expected and "schema" in expected
    want = digest(expected) if full else expected.get("digest")
    if want == d:
        return {**out, "ok": True}
    if full:
        diffs = differences(expected, actual)
    else:
        diffs = [(f"the change set differs from the recorded one (expected {expected.get('summary')}, got "
                  f"{summary(actual)})")]
    return {**out, "ok": False, "reason": "the database differs from the expected end state: " + "; ".join(diffs[:1]),
            "differences": diffs}


def _against_reference(out: dict, spec: dict, rel: str, end: str, env_dir: str, reference: dict | None,
                       json_state: bool = False) -> dict:
    """The replay mode of ``whole_db`` and ``whole_json``: the end state against the reference's end state."""
    out["mode"] = "replay"
    calls = (reference or {}).get("calls")
    if not isinstance(calls, list):
        return {**out, "ok": False, "error": "replay mode needs the task's reference, and the request has none"}
    try:
        work, failed = replay_reference(env_dir, calls)
    except StateError as e:
        return {**out, "ok": False, "error": str(e)}
    diff = json_changeset if json_state else changeset
    try:
        gap = diff(_under(work, rel, "replay dir"), end, spec.get("ignore"))
    except StateError as e:
        return {**out, "ok": False, "error": f"after the reference replay: {e}"}
    finally:
        shutil.rmtree(os.path.dirname(work), ignore_errors=True)
    if failed:
        out["reference_failures"] = failed
    if json_state:
        same, diffs, gist, what = not gap["json"], json_differences({"json": []}, gap), _json_summary(gap), "state"
    else:
        same, gist, what = not gap["schema"] and not gap["tables"], summary(gap), "database"
        diffs = differences({"schema": [], "tables": {}}, gap)
    if same:
        return {**out, "ok": True}
    return {**out, "ok": False, "gap": gist, "differences": diffs,
            "reason": f"the end {what} differs from the reference's end state (before: the reference's, after: "
                      "the episode's): " + "; ".join(diffs[:1])}


# ------------------------------------------------------------------ JSON state files


def _jvalue(v):
    """A JSON leaf as compared: the number by value (12 significant digits, 3.0 == 3), the rest as parsed."""
    if isinstance(v, float):
        if math.isinf(v) or math.isnan(v):
            return {"real": repr(v)}
        v = float(f"{v:.12g}")
        return int(v) if v.is_integer() and abs(v) < 2 ** 53 else v
    if isinstance(v, dict):
        return {k: _jvalue(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_jvalue(x) for x in v]
    return v


def _pointer(parts: list) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _jdiff(a, b, parts: list, skip, out: list) -> None:
    if skip(_pointer(parts)):
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a:
                if not skip(_pointer(parts + [k])):
                    out.append({"path": _pointer(parts + [k]), "before": _ABSENT, "after": _jvalue(b[k])})
            elif k not in b:
                if not skip(_pointer(parts + [k])):
                    out.append({"path": _pointer(parts + [k]), "before": _jvalue(a[k]), "after": _ABSENT})
            else:
                _jdiff(a[k], b[k], parts + [k], skip, out)
    elif isinstance(a, list) and isinstance(b, list):
        for i in range(max(len(a), len(b))):
            _jdiff(a[i] if i < len(a) else _ABSENT, b[i] if i < len(b) else _ABSENT, parts + [i], skip, out)
    elif a is _ABSENT or b is _ABSENT or _dumps(_jvalue(a)) != _dumps(_jvalue(b)):
        out.append({"path": _pointer(parts), "before": _ABSENT if a is _ABSENT else _jvalue(a),
                    "after": _ABSENT if b is _ABSENT else _jvalue(b)})


def _load_json(path: str):
    if not os.path.isfile(path):
        raise StateError(f"JSON state {path} is missing")
    try:
        with open(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise StateError(f"JSON state {path} cannot be read: {e}") from None


def json_changeset(before: str, after: str, ignore=()) -> dict:
    """How the JSON document at ``after`` differs from the one at ``before``: ``{"json": [change, ...]}``
    (see the module docstring). Raises StateError when either cannot be read."""
    pats = [str(p) for p in ignore or ()]
    skip = (lambda ptr: any(fnmatch.fnmatchcase(ptr, p) for p in pats)) if pats else (lambda ptr: False)
    if _same_file(before, after):
        return {"json": []}
    out: list = []
    _jdiff(_load_json(before), _load_json(after), [], skip, out)
    return {"json": out}


def _json_summary(changes: dict) -> dict:
    items = changes.get("json") or []
    return {"changed": len(items), "paths": [c["path"] for c in items[:MAX_DIFFERENCES]]}


def json_differences(expected: dict, actual: dict, limit: int = MAX_DIFFERENCES) -> list[str]:
    """Readable lines naming the first leaves where two JSON change sets differ."""
    e = {c["path"]: c for c in expected.get("json") or []}
    a = {c["path"]: c for c in actual.get("json") or []}
    out = []
    for p in sorted(set(e) | set(a)):
        if p not in e:
            out.append(_clip(f"{p}: changed ({_dumps(a[p]['before'])} -> {_dumps(a[p]['after'])}), the task does "
                             "not change it"))
        elif p not in a:
            out.append(_clip(f"{p}: should have changed ({_dumps(e[p]['before'])} -> {_dumps(e[p]['after'])})"))
        elif _dumps(e[p]) != _dumps(a[p]):
            out.append(_clip(f"{p}: expected {_dumps(e[p]['after'])}, got {_dumps(a[p]['after'])}"))
    return out[:limit]


def whole_json(spec: dict, *, work_dir: str, env_dir: str | None, reference: dict | None = None) -> dict:
    """``whole_db`` for a JSON state file (``spec``: json, ignore, expected | replay)."""
    rel = spec.get("json")
    if not isinstance(rel, str) or not rel:
        raise ValueError("changes needs the JSON state path (json) relative to the work dir")
    out: dict = {"json": rel}
    if not env_dir:
        return {**out, "ok": False, "error": "no pristine env dir to compare the JSON state with"}
    try:
        end = _under(work_dir, rel, "work dir")
        actual = json_changeset(_under(env_dir, rel, "env dir"), end, spec.get("ignore"))
    except StateError as e:
        return {**out, "ok": False, "error": str(e)}
    d = digest(actual)
    inline = len(_dumps(actual)) <= INLINE_LIMIT
    out.update(digest=d, summary=_json_summary(actual),
               actual=actual if inline else {"digest": d, "summary": _json_summary(actual)})
    if spec.get("replay"):
        return _against_reference(out, spec, rel, end, env_dir, reference, json_state=True)
    expected = spec.get("expected")
    if not isinstance(expected, dict) or not isinstance(expected.get("json"), list):
        return {**out, "ok": False, "error": "no expected change set was recorded for this task; refusing to pass by "
                                             "default"}
    if digest(expected) == d:
        return {**out, "ok": True}
    diffs = json_differences(expected, actual)
    return {**out, "ok": False, "differences": diffs,
            "reason": "the JSON state differs from the expected end state: " + "; ".join(diffs[:1])}


# ------------------------------------------------------------------ the state kind


def _rows(cur) -> list[list]:
    return [list(r) for r in cur.fetchall()]


def check(args: dict, *, work_dir: str, env_dir: str | None = None, reference: dict | None = None, **_) -> dict:
    """args: db (path under the work dir); changes={ignore, expected | replay} (the whole-database check,
    always on: a task without a recorded ``expected`` or ``replay: true`` scores 0); checks=[{query, params=[], expected=[[...]],
    ordered=false}] (task-specific queries on top, optional); partial=false (reward = fraction of checks
    passed instead of all-or-nothing, and only when the whole-database check passes)."""
    if args.get("json") is not None:
        if args.get("checks"):
            raise ValueError("state verifier: checks are SQL queries; a JSON state (args.json) has none")
        whole = whole_json({**(args.get("changes") or {}), "json": args["json"]}, work_dir=work_dir, env_dir=env_dir,
                           reference=reference)
        details = {"changes": whole}
        if not whole["ok"]:
            details["reason"] = whole.get("error") or whole.get("reason")
        return {"reward": float(whole["ok"]), "details": details}
    db = _under(work_dir, args["db"], "work dir")
    spec = {**(args.get("changes") or {}), "db": args["db"]}
    whole = whole_db(spec, work_dir=work_dir, env_dir=env_dir, reference=reference)
    if not os.path.isfile(db):
        return {"reward": 0.0, "details": {"reason": f"database {args['db']} is missing", "changes": whole}}
    results = []
    con = sqlite3.connect(pathlib.Path(os.path.abspath(db)).as_uri() + "?mode=ro", uri=True)
    try:
        for c in args.get("checks") or []:
            try:
                got = _rows(con.execute(c["query"], c.get("params", [])))
            except sqlite3.Error as e:
                results.append({"query": c["query"], "ok": False, "error": str(e)})
                continue
            want = [list(r) for r in c["expected"]]
            ok = got == want if c.get("ordered") else sorted(map(repr, got)) == sorted(map(repr, want))
            results.append({"query": c["query"], "ok": ok, **({} if ok else {"got": got[:20], "expected": want[:20]})})
    finally:
        con.close()
    passed = sum(r["ok"] for r in results)
    if not results:
        reward = 1.0
    else:
        reward = passed / len(results) if args.get("partial") else float(passed == len(results))
    details = {"passed": passed, "checks": results, "changes": whole}
    if not whole["ok"]:
        reward = 0.0
        details["reason"] = whole.get("error") or whole.get("reason")
    return {"reward": reward, "details": details}


# ------------------------------------------------------------------ the no_write kind


def check_no_write(args: dict, *, work_dir: str, env_dir: str | None = None, **_) -> dict:
    """args: db (a path under the work dir) or dbs (several), json or jsons (JSON state files), ignore=[patterns:
    table.column for databases, JSON pointers for JSON files]. Reward 1 when every database and JSON file ends
    exactly as pristine (schema and rows; the parsed document), else 0 with the first changes."""
    dbs = args.get("dbs") if args.get("dbs") is not None else [args["db"]] if args.get("db") is not None else []
    jsons = args.get("jsons") if args.get("jsons") is not None else [args["json"]] if args.get("json") is not None \
        else []
    if not isinstance(dbs, list) or not isinstance(jsons, list) or not (dbs or jsons) or \
            not all(isinstance(d, str) and d for d in dbs + jsons):
        raise ValueError("no_write verifier needs args.db (a database path) or args.dbs (a non-empty list of them), "
                         "or args.json / args.jsons (JSON state files)")
    none = {"schema": [], "tables": {}}
    results = [whole_db({"db": d, "ignore": args.get("ignore"), "expected": none}, work_dir=work_dir, env_dir=env_dir)
               for d in dbs]
    results += [whole_json({"json": j, "ignore": args.get("ignore"), "expected": {"json": []}}, work_dir=work_dir,
                           env_dir=env_dir) for j in jsons]
    details: dict = {"databases": results}
    if len(results) == 1:
        details["changes"] = results[0]
    bad = next((r for r in results if not r["ok"]), None)
    if bad is not None:
        why = bad.get("error") or "; ".join(bad.get("differences", [])[:1])
        details["reason"] = f"{bad.get('db') or bad.get('json')}: the task changes nothing, but the episode did: {why}"
        return {"reward": 0.0, "details": details}
    return {"reward": 1.0, "details": details}

"""Pack format: round trip, content hash, atomic writes, and one-line errors for every broken-pack case."""

from __future__ import annotations

import json
import shutil

import pytest

from envgen.pack import format as packmod
from envgen.errors import PackError
from envgen.pack.resolve import open_pack


def _rewrite_task(root, lineno, mutate):
    path = root / "tasks.jsonl"
    lines = path.read_text().splitlines()
    obj = json.loads(lines[lineno - 1])
    mutate(obj)
    lines[lineno - 1] = json.dumps(obj)
    path.write_text("\n".join(lines) + "\n")


def _rewrite_manifest(root, mutate):
    path = root / "pack.json"
    obj = json.loads(path.read_text())
    mutate(obj)
    path.write_text(json.dumps(obj, indent=2))


def test_round_trip_and_hash(tiny_pack, tmp_path):
    again = packmod.load(tiny_pack.root)
    assert [t.model_dump() for t in again.tasks] == [t.model_dump() for t in tiny_pack.tasks]
    packmod.verify_hash(again)
    copy = packmod.save(again, tmp_path / "copy")
    assert copy.manifest.version == tiny_pack.manifest.version
    assert (copy.root / "README.md").read_text().startswith("# tiny")
    assert copy.manifest.stats["tasks"] == 3 and copy.manifest.stats["difficulty"] == {"2": 3}


def test_optional_task_fields_are_not_written_when_unused(tiny_pack):
    """Fields added for conversational and refusal tasks (user, reference.messages, reference.forbidden) are
    left out of tasks.jsonl when a task does not use them, so a pack without them keeps its content hash."""
    rows = [json.loads(line) for line in (tiny_pack.root / "tasks.jsonl").read_text().splitlines()]
    assert rows and all("user" not in r and not {"messages", "forbidden", "patch"} & set(r["reference"]) for r in rows)


def test_hash_changes_with_content(tiny_pack):
    (tiny_pack.root / "env" / "tools.py").write_text("# changed\n")
    with pytest.raises(PackError, match="modified since it was saved"):
        packmod.verify_hash(packmod.load(tiny_pack.root))


def test_bytecode_is_not_part_of_a_pack(tiny_pack, tmp_path):
    cache = tiny_pack.root / "env" / "__pycache__"
    cache.mkdir()
    (cache / "tools.cpython-312.pyc").write_bytes(b"\x00bytecode")
    (tiny_pack.root / "hidden" / "verify.pyc").write_bytes(b"\x00bytecode")
    packmod.verify_hash(open_pack(tiny_pack.root))
    copy = packmod.save(packmod.load(tiny_pack.root), tmp_path / "copy")
    assert copy.manifest.version == tiny_pack.manifest.version
    assert not (copy.root / "env" / "__pycache__").exists() and not (copy.root / "hidden" / "verify.pyc").exists()


def test_hash_cache_keyed_by_size_and_mtime(tiny_pack, monkeypatch, tmp_path):
    monkeypatch.setenv("ENVGEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(packmod, "_RACY_S", -1.0)  # trust files written a moment ago
    calls = []
    real = packmod.content_hash
    monkeypatch.setattr(packmod, "content_hash", lambda *a: calls.append(1) or real(*a))
    open_pack(tiny_pack.root)
    open_pack(tiny_pack.root)
    assert len(calls) == 1 and list((tmp_path / "cache" / "hashes").iterdir())
    tools = tiny_pack.root / "env" / "tools.py"
    tools.write_text(tools.read_text() + "\n# edited\n")
    with pytest.raises(PackError, match="modified since it was saved.*--allow-modified"):
        open_pack(tiny_pack.root)
    assert len(calls) == 2


def test_open_pack_refuses_a_modified_pack_unless_allowed(tiny_pack):
    tools = tiny_pack.root / "env" / "tools.py"
    tools.write_text(tools.read_text() + "\n# edited\n")
    with pytest.raises(PackError) as e:
        open_pack(str(tiny_pack.root))
    assert len(str(e.value).splitlines()) == 1 and str(tiny_pack.root) in str(e.value)
    said = []
    p = open_pack(str(tiny_pack.root), allow_modified=True, log=said.append)
    assert p.manifest.version != tiny_pack.manifest.version and "re-hashed" in said[0]
    packmod.verify_hash(packmod.load(tiny_pack.root))  # pack.json now names the new content
    assert open_pack(str(tiny_pack.root)).manifest.version == p.manifest.version


def test_save_in_place_is_atomic_and_leaves_no_temp(tiny_pack):
    p = tiny_pack.with_tasks(tiny_pack.tasks[:1])
    packmod.save(p, tiny_pack.root)
    assert len(packmod.load(tiny_pack.root).tasks) == 1
    assert [x.name for x in tiny_pack.root.parent.iterdir() if x.name.startswith(".")] == []


def test_failed_save_keeps_old_pack(tiny_pack, monkeypatch):
    before = (tiny_pack.root / "tasks.jsonl").read_text()

    def broken(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(packmod, "card", broken)
    with pytest.raises(OSError):
        packmod.save(tiny_pack.with_tasks([]), tiny_pack.root)
    assert (tiny_pack.root / "tasks.jsonl").read_text() == before
    assert [x.name for x in tiny_pack.root.parent.iterdir() if x.name.startswith(".")] == []


CASES = [
    ("bad task JSON", lambda r: (r / "tasks.jsonl").write_text(
        "\n".join(["{\"id\": \"x\", oops}"] + (r / "tasks.jsonl").read_text().splitlines()[1:]) + "\n"),
     r"tasks\.jsonl:1: invalid JSON: Expecting property name enclosed in double quotes \(column 13\)"),
    ("missing field", lambda r: _rewrite_task(r, 2, lambda o: o.pop("verifier")), r"tasks\.jsonl:2: verifier: missing required field"),
    ("unknown verifier kind", lambda r: _rewrite_task(r, 3, lambda o: o["verifier"].update(kind="vibes")),
     r"tasks\.jsonl:3: verifier\.kind: unknown kind 'vibes' \(expected one of answer, state, program, rubric, tests, said, no_write, composite, confirmed, transferred, "
     r"identified\)"),
    ("task names unknown tool", lambda r: _rewrite_task(r, 1, lambda o: o.update(tools=["add", "teleport"])),
     r"tasks\.jsonl:1: tools\[1\]: unknown tool 'teleport'"),
    ("reference calls unknown tool", lambda r: _rewrite_task(r, 1, lambda o: o["reference"]["calls"][0].update(tool="x")),
     r"tasks\.jsonl:1: reference\.calls\[0\]\.tool: unknown tool 'x'"),
    ("duplicate id", lambda r: _rewrite_task(r, 2, lambda o: o.update(id="tiny-0")), r"tasks\.jsonl:2: id: 'tiny-0' repeats line 1"),
    ("difficulty below calls", lambda r: _rewrite_task(r, 1, lambda o: o.update(difficulty=1)),
     r"tasks\.jsonl:1: difficulty 1 is below the 2 tool calls"),
    ("schema not object", lambda r: _rewrite_manifest(r, lambda o: o["tools"][0]["function"]["parameters"].update(type="array")),
     r"pack\.json: tools\[0\]\.function\.parameters: 'type' must be 'object'"),
    ("schema invalid JSON schema", lambda r: _rewrite_manifest(
        r, lambda o: o["tools"][1]["function"]["parameters"]["properties"].update(key={"type": "strnig"})),
     r"pack\.json: tools\[1\]\.function\.parameters: not a valid JSON Schema"),
    ("required not in properties", lambda r: _rewrite_manifest(
        r, lambda o: o["tools"][0]["function"]["parameters"].update(required=["a", "zzz"])),
     r"pack\.json: tools\[0\]\.function\.parameters: 'required' names \['zzz'\]"),
    ("bad tool name", lambda r: _rewrite_manifest(r, lambda o: o["tools"][0]["function"].update(name="no spaces")),
     r"pack\.json: tools\[0\]\.function\.name: tool name 'no spaces' must match"),
    ("tool type not function", lambda r: _rewrite_manifest(r, lambda o: o["tools"][0].update(type="retrieval")),
     r"pack\.json: tools\[0\]\.type"),
    ("manifest missing field", lambda r: _rewrite_manifest(r, lambda o: o.pop("family")), r"pack\.json: family: missing required field"),
    ("manifest bad JSON", lambda r: (r / "pack.json").write_text('{\n  "name": "x",\n  oops\n}'), r"pack\.json:3: invalid JSON"),
    ("unknown manifest field", lambda r: _rewrite_manifest(r, lambda o: o.update(colour="red")), r"pack\.json: colour: unknown field"),
    ("unknown submit tool", lambda r: _rewrite_manifest(r, lambda o: o.update(submit_tool="nope")),
     r"pack\.json: submit_tool 'nope' is not one of the pack's tools"),
    ("future schema", lambda r: _rewrite_manifest(r, lambda o: o.update(schema_version=9)), r"pack\.json: schema_version: schema_version 9"),
    ("no env dir", lambda r: shutil.rmtree(r / "env"), r"env: missing"),
    ("no tasks file", lambda r: (r / "tasks.jsonl").unlink(), r"tasks\.jsonl: missing"),
    ("not a pack", lambda r: (r / "pack.json").unlink(), r"not a pack \(no pack\.json\)"),
]


@pytest.mark.parametrize("name,breaker,pattern", CASES, ids=[c[0] for c in CASES])
def test_broken_pack_fails_with_one_line(tiny_pack, name, breaker, pattern):
    breaker(tiny_pack.root)
    with pytest.raises(PackError) as e:
        packmod.load(tiny_pack.root)
    msg = str(e.value)
    assert "\n" not in msg
    assert str(tiny_pack.root) in msg
    import re

    assert re.search(pattern, msg), msg


def test_task_by_id_and_tools_for(tiny_pack):
    t = tiny_pack.task("tiny-1")
    assert [s["function"]["name"] for s in tiny_pack.tools_for(t)] == tiny_pack.manifest.tool_names
    narrowed = t.model_copy(update={"tools": ["put", "submit"]})
    assert [s["function"]["name"] for s in tiny_pack.tools_for(narrowed)] == ["put", "submit"]
    with pytest.raises(PackError, match="no task with id 'zzz'"):
        tiny_pack.task("zzz")

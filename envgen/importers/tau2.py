"""``envgen import tau2 PATH``: a tau2-bench domain from a user's own checkout, as a pack, with no hand edits.

What goes where:

- **tools**: the domain's own code (``src/tau2/domains/<d>/tools.py``, ``data_model.py`` and the domain
  modules they import) is copied byte for byte into the pack's ``env/``, with small stand-ins for the
  framework names it imports (``envgen.importers.tau2_sandbox``). Each pack tool calls tau2's method on the
  domain's JSON database (``env/state/db.json``, loaded with the domain's pydantic model) and writes it back
  after a tool tau2 marks as mutating. The agent sees the tools' schemas as tau2 builds them (a pydantic model
  of each signature, typed, with the docstring's argument descriptions) and the policy as the pack's
  ``instructions``; the image pip-installs pydantic.
- **user**: tau2's user scenario is the task's hidden user spec: the goal is ``reason_for_call`` plus
  ``task_instructions`` (and what the user does not know), the persona is tau2's, ``known_info`` is the fact
  told when asked. The agent sees a neutral opening, never the instructions.
- **checks**: tau2's expected actions are the reference calls; the end state must equal theirs replayed
  (``state`` over the JSON file), or stay pristine where tau2 expects no write (``no_write``);
  ``communicate_info`` must be told (``said``); every write must follow a description and the user's yes
  (``confirmed``) and an expected ``transfer_to_human_agents`` must happen (``transferred``), where the kit has
  those kinds; ``nl_assertions`` become a judged ``rubric`` part (see ``nl_assertions``).
- **reference**: the expected actions, with a greeting, a description + consent question before each write
  and a final message that tells ``communicate_info``, so the oracle replay scores 1.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ImportSourceError
from ..pack import format as packmod
from . import tau2_sandbox as sandbox

STATE = "state/db.json"
GREETING = "Hi! How can I help you today?"
"""tau2's agent greeting (``Manifest.greeting``): the agent speaks first, as in tau2, and the user's opening comes
from its spec (``UserSpec.opening``), so task prompts hold no user message and nothing of the hidden scenario."""
OPENING = "Hi, I need some help."
"""The user's opening when the scenario gives no reason for the call."""
CONSENT = "Shall I proceed?"
CLOSING_QUESTION = "Is there anything else I can help you with?"
NL_MODES = ("report", "require")
USER_DEFAULTS = {"stop": [re.escape(CLOSING_QUESTION)], "closing": "No, that's all. Thank you!"}
"""What every task's user shares: the pack's ``Manifest.user`` (the tasks store only what differs)."""
IDENTITY_ASK = (r"\b(name|zip|postcode|post code|e-?mail|user ?id|account|identif|authenticat|verify|"
                r"look you up|date of birth|phone)\b")
REQUEST_ASK = r"how (can|may) i (help|assist)|what can i (do|help)|help you with"


@dataclass
class ImportReport:
    """What ``import_tau2`` made: the pack, its task counts and what it could not carry."""

    pack: packmod.Pack
    domain: str
    tasks: int
    skipped: dict[str, str] = field(default_factory=dict)
    """tau2 task id -> why it was not imported."""
    kinds: dict[str, int] = field(default_factory=dict)
    """Verifier part kind -> tasks using it."""
    write_tools: list[str] = field(default_factory=list)
    """The tools tau2 marks as mutating the state."""


# ------------------------------------------------------------------ the checkout


def _domain_dirs(root: Path, domain: str) -> tuple[Path, Path]:
    if not (root / "src" / "tau2").is_dir():
        raise ImportSourceError(f"{root}: not a tau2-bench checkout (no src/tau2/); pass the repository's root")
    src = root / "src" / "tau2" / "domains" / domain
    if not (src / "tools.py").is_file():
        have = sorted(p.parent.name for p in (root / "src" / "tau2" / "domains").glob("*/tools.py"))
        raise ImportSourceError(f"{root}: no tau2 domain {domain!r} (src/tau2/domains/{domain}/tools.py); the checkout "
                              f"has {', '.join(have) or 'none'}")
    data = root / "data" / "tau2" / "domains" / domain
    if not data.is_dir():
        raise ImportSourceError(f"{data} is missing: the domain's data (db, tasks, policy) must be in the checkout")
    if (src / "user_tools.py").is_file():
        raise ImportSourceError(f"{src}: domain {domain!r} gives the user tools of their own (user_tools.py, a device the "
                              "user operates); envgen's simulated users have no tools, so its tasks cannot be played. "
                              "Import a domain where only the agent acts (retail, airline)")
    return src, data


def _read(path: Path, what: str) -> bytes:
    """The bytes of a required file, or one line saying why it cannot be had."""
    if not path.is_file():
        raise ImportSourceError(f"{path} is missing ({what}); a clone or snapshot without large files (e.g. blobs of "
                              "4 MiB and more left out) lacks it: fetch the file into the checkout and rerun")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ImportSourceError(f"{path} cannot be read ({what}): {e.strerror or e}") from None
    if data.startswith(b"version https://git-lfs") or data.startswith(b"/annex/objects/"):
        raise ImportSourceError(f"{path} is a large-file pointer, not the {what}: fetch its content (git lfs pull / "
                              "git annex get) and rerun")
    return data


def _json(path: Path, what: str) -> Any:
    try:
        return json.loads(_read(path, what).decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ImportSourceError(f"{path} is not valid JSON ({what}): {e}") from None


def _database(data: Path) -> Any:
    """The domain's database as JSON data (tau2 keeps some as TOML)."""
    toml = data / "db.toml"
    if toml.exists() and not (data / "db.json").exists():
        try:
            return tomllib.loads(_read(toml, "the domain's database").decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise ImportSourceError(f"{toml} is not valid TOML (the domain's database): {e}") from None
    return _json(data / "db.json", "the domain's database")


def _policy(data: Path) -> str:
    for name in ("policy.md", "main_policy.md"):
        if (data / name).exists():
            return _read(data / name, "the domain's policy").decode("utf-8")
    raise ImportSourceError(f"{data}/policy.md is missing (the domain's policy the agent follows)")


def _tasks(data: Path, tasks_file: str | None, split: str | None) -> list[dict]:
    path = Path(tasks_file) if tasks_file else data / "tasks.json"
    if tasks_file and not path.is_absolute() and not path.exists():
        path = data / tasks_file
    tasks = _json(path, "the domain's tasks")
    if not isinstance(tasks, list) or not all(isinstance(t, dict) and "id" in t for t in tasks):
        raise ImportSourceError(f"{path}: expected a JSON list of tau2 tasks (objects with an id)")
    if split is None:
        return tasks
    split_path = path.parent / f"split_{path.stem}.json"
    splits = _json(split_path, "the task splits")
    if split not in splits:
        raise ImportSourceError(f"{split_path}: no split {split!r}; it has {', '.join(sorted(splits))}")
    keep = {str(i) for i in splits[split]}
    return [t for t in tasks if str(t["id"]) in keep]


# ------------------------------------------------------------------ the domain's code


def _imports(path: Path, package: str) -> list[tuple[str, list[str]]]:
    """(module, names) of every import statement in a file of ``package`` (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 1:  # from .data_model import X / from . import utils
            if node.module:
                out.append((f"{package}.{node.module}", [a.name for a in node.names]))
            else:
                out += [(f"{package}.{a.name}", []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise ImportSourceError(f"{path}: a relative import above the domain's package (line {node.lineno}); "
                                    "the importer copies the domain's own modules only")
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.module, [a.name for a in node.names]))
    return out


def _domain_files(src: Path, domain: str) -> list[Path]:
    """tools.py and the domain modules it reaches; raises when the code needs what a pack cannot carry."""
    prefix = f"tau2.domains.{domain}"
    todo, seen = [src / "tools.py"], []
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.append(path)
        for module, names in _imports(path, prefix):
            top = module.partition(".")[0]
            if module == prefix or module.startswith(prefix + "."):
                rel = module[len(prefix) + 1:].replace(".", "/")
                target = src / (rel + ".py") if rel else src / "__init__.py"
                if not target.is_file():
                    raise ImportSourceError(f"{path}: imports {module}, which is not in the checkout")
                todo.append(target)
            elif module in sandbox.PROVIDED:
                missing = sorted(set(names) - sandbox.PROVIDED[module])
                if missing:
                    raise ImportSourceError(f"{path}: imports {', '.join(missing)} from {module}, which an imported pack "
                                          "does not carry (tau2's framework beyond the tool decorator and the DB "
                                          "base class)")
            elif top == "tau2":
                raise ImportSourceError(f"{path}: imports {module}, part of tau2's framework an imported pack does not "
                                      "carry; only domains whose tools need the toolkit and DB base classes import")
            elif top not in sys.stdlib_module_names and top not in sandbox.THIRD_PARTY:
                raise ImportSourceError(f"{path}: imports {module}, a package the pack's image does not install "
                                      f"(it has {', '.join(sorted(sandbox.THIRD_PARTY))})")
    return sorted(seen)


def _class_with_base(path: Path, bases: set[str]) -> str | None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and any(
                (b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else "") in bases
                for b in node.bases):
            return node.name
    return None


def _write_env(env: Path, src: Path, domain: str, db: Any) -> None:
    files = _domain_files(src, domain)
    toolkit = _class_with_base(src / "tools.py", {"ToolKitBase"})
    if toolkit is None:
        raise ImportSourceError(f"{src / 'tools.py'}: no class derived from ToolKitBase (the domain's toolkit)")
    if not (src / "data_model.py").is_file():
        raise ImportSourceError(f"{src}/data_model.py is missing (the domain's database model)")
    db_class = _class_with_base(src / "data_model.py", {"DB"})
    if db_class is None:
        raise ImportSourceError(f"{src / 'data_model.py'}: no class derived from DB (the domain's database model)")
    for rel, text in sandbox.FRAMEWORK.items():
        (env / rel).parent.mkdir(parents=True, exist_ok=True)
        (env / rel).write_text(text, encoding="utf-8")
    pkg = env / "tau2" / "domains"
    (pkg / domain).mkdir(parents=True)
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / domain / "__init__.py").write_text("", encoding="utf-8")
    for path in files + [src / "data_model.py"]:
        shutil.copyfile(path, pkg / domain / path.name)
    (env / "_tau2.py").write_text(sandbox.BRIDGE.format(domain=domain, toolkit=toolkit, db_class=db_class,
                                                        state=STATE), encoding="utf-8")
    (env / "state").mkdir()
    (env / STATE).write_text(json.dumps(db, ensure_ascii=False), encoding="utf-8")
    (env / "Dockerfile").write_text(sandbox.DOCKERFILE, encoding="utf-8")


def _describe(env: Path, python: str, where: str) -> list[dict]:
    """Run the pack's own bridge once on the host: tool schemas, types, and the state in canonical form."""
    out = subprocess.run([python, "-B", str(env / "_tau2.py"), str(env)], capture_output=True, text=True,
                         timeout=600, cwd=env)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise ImportSourceError(f"{where}: the domain's tools or database do not load ({last}); the importer runs "
                                f"them with {python}, which needs pydantic 2")
    return json.loads(out.stdout)["tools"]


def _tools_py(domain: str, tools: list[dict]) -> str:
    """The pack's tools.py: one function per tau2 tool, same name, parameters and docstring, calling tau2's."""
    lines = [f'"""tau2-bench\'s {domain} tools (written by `envgen import tau2`): each calls the domain\'s own method',
             'against the JSON state through _tau2.py, which sits beside this file."""', "", "import os",
             "import sys", "", "sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))", "",
             "import _tau2  # noqa: E402", ""]
    for t in tools:
        params = ", ".join(p["name"] if p["required"] else f"{p['name']}={p['default']}" for p in t["params"])
        doc = inspect.cleandoc(t["doc"]).replace("\\", "\\\\").replace('"""', "'''").replace("\n", "\n    ")
        kwargs = ", ".join(f"{p['name']}={p['name']}" for p in t["params"])
        lines += ["", f"def {t['name']}({params}):", f'    """{doc}"""',
                  f"    return _tau2.call({t['name']!r}{', ' if kwargs else ''}{kwargs})", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------ tasks


_SECOND_PERSON = [(r"\byou are\b", "I am"), (r"\byou were\b", "I was"), (r"\byou're\b", "I'm"),
                  (r"\byou've\b", "I've"), (r"\byou'd\b", "I'd"), (r"\byou'll\b", "I'll"),
                  (r"\byourself\b", "myself"), (r"\byours\b", "mine"), (r"\byour\b", "my"), (r"\byou\b", "I")]


def first_person(text: str) -> str:
    """tau2 writes the user's scenario to the user ("You are Yusuf Rossi in zip code 19122"); the scripted user
    says it ("I am Yusuf Rossi in zip code 19122")."""
    out = text.strip()
    for pat, rep in _SECOND_PERSON:
        out = re.sub(pat, lambda m, r=rep: r[0].upper() + r[1:] if m.group(0)[0].isupper() else r, out,
                     flags=re.IGNORECASE)
    return out


def _scenario(task: dict) -> dict:
    scen = task.get("user_scenario") or {}
    instr = scen.get("instructions")
    if isinstance(instr, str):
        instr = {"task_instructions": instr}
    return {"persona": scen.get("persona") or "", **(instr or {})}


def _user_spec(scen: dict, n_steps: int) -> dict:
    reason = (scen.get("reason_for_call") or "").strip()
    goal = "\n\n".join(x for x in (reason, (scen.get("task_instructions") or "").strip(),
                                   ("What you do not know: " + scen["unknown_info"].strip())
                                   if scen.get("unknown_info") else "") if x)
    facts = []
    if reason:
        facts.append({"name": "request", "value": reason, "ask": REQUEST_ASK, "reply": first_person(reason)})
    if scen.get("known_info"):
        facts.append({"name": "known_info", "value": scen["known_info"].strip(), "ask": IDENTITY_ASK,
                      "reply": first_person(scen["known_info"])})
    spec: dict = {"goal": goal or "Get help from the agent.", "persona": scen.get("persona") or "", "facts": facts,
                  **USER_DEFAULTS, "max_replies": n_steps + 8}
    spec["opening"] = first_person(reason) if reason else OPENING
    return spec


def _text(v: Any) -> str:
    if isinstance(v, list):
        return ", ".join(_text(x) for x in v)
    if isinstance(v, dict):
        return "(" + ", ".join(f"{k.replace('_', ' ')} {_text(x)}" for k, x in v.items()) + ")"
    return str(v)


def _describe_call(tool: str, args: dict) -> str:
    """The reference's description of a write before asking consent: the action and every argument's value."""
    what = "; ".join(f"{k.replace('_', ' ')}: {_text(v)}" for k, v in args.items())
    return f"To confirm, I will {tool.replace('_', ' ')} with {what}. {CONSENT}"


def key_args(tool: dict) -> list[str]:
    """The arguments a description of a write must name: its ids (``*_id``/``*_ids``), else its first one."""
    names = [p["name"] for p in tool["params"]]
    ids = [n for n in names if n.endswith("_id") or n.endswith("_ids") or n == "id"]
    return ids or names[:1]


def _fact(info: str) -> Any:
    s = info.strip()
    if re.fullmatch(r"-?\d+", s):
        return int(s)
    if re.fullmatch(r"-?\d+\.\d+", s):
        return float(s)
    return s


def _convert(task: dict, domain: str, tools: dict[str, dict], nl_mode: str) -> tuple[packmod.Task | None, str]:
    """One tau2 task as a pack task, or (None, why it cannot be played here)."""
    crit = task.get("evaluation_criteria") or {}
    actions = crit.get("actions") or []
    for a in actions:
        if a.get("requestor", "assistant") != "assistant":
            return None, f"action {a.get('action_id')} is the user's ({a.get('name')}): envgen's users have no tools"
        if a.get("name") not in tools:
            return None, f"action {a.get('action_id')} calls {a.get('name')!r}, which the domain's toolkit lacks"
    init = task.get("initial_state") or {}
    if any(init.get(k) for k in ("initialization_data", "initialization_actions", "message_history")):
        return None, "an initial state of its own (initialization data, actions or message history): a pack's tasks " \
                     "share one state"
    if crit.get("env_assertions"):
        return None, "env_assertions (checks run by tau2's environment code) have no offline equivalent here"
    calls = [{"tool": a["name"], "args": a.get("arguments") or {}} for a in actions]
    writes = [i for i, c in enumerate(calls) if tools[c["tool"]]["mutates"]]
    transfers = [i for i, c in enumerate(calls) if c["tool"].startswith("transfer_to_human")]
    messages = []
    for i, c in enumerate(calls):
        if i in writes:
            messages.append({"after": i, "content": _describe_call(c["tool"], c["args"])})
        elif i in transfers:
            messages.append({"after": i, "content": "I am transferring you to a human agent now."})
    info = list(dict.fromkeys(str(x).strip() for x in crit.get("communicate_info") or [] if str(x).strip()))
    # one message per value: values told side by side read as candidates for one another
    messages += [{"after": len(calls), "content": f"Here is what you asked about: {x}."} for x in info]
    answer = CLOSING_QUESTION

    parts: list[dict] = []
    if writes:
        parts.append({"name": "end_state", "kind": "state", "args": {"json": STATE, "changes": {"replay": True}}})
    else:
        parts.append({"name": "nothing_changed", "kind": "no_write", "args": {"json": STATE}})
    if info:
        parts.append({"name": "told", "kind": "said", "args": {"facts": [
            {"expected": _fact(x), "name": f"information {k + 1}"} for k, x in enumerate(info)]}})
    if writes:
        parts.append({"name": "confirmed", "kind": "confirmed", "args": {"writes": {
            n: key_args(t) for n, t in tools.items() if t["mutates"]}}})
    if transfers:
        parts.append({"name": "transferred", "kind": "transferred", "args": {"tool": calls[transfers[0]]["tool"]}})
    verifier: dict = {"kind": "composite", "args": {"mode": "all", "parts": parts}}
    nl = [str(x) for x in crit.get("nl_assertions") or [] if str(x).strip()]
    if nl:
        scen = _scenario(task)
        rubric = {"name": "nl_assertions", "kind": "rubric", "weight": 1, "args": {
            "question": (scen.get("reason_for_call") or "The customer's request.").strip(),
            "criteria": [{"id": f"a{k + 1}", "text": x, "weight": 1} for k, x in enumerate(nl)]}}
        if nl_mode == "require":
            verifier["args"]["parts"].append(rubric)
        else:  # the judge grades and reports it; offline, the deterministic parts decide
            verifier = {"kind": "composite", "args": {"mode": "weighted", "threshold": 0.9, "parts": [
                {"name": "checks", "kind": "composite", "weight": 9, "args": verifier["args"]}, rubric]}}
    scen = _scenario(task)
    out = packmod.Task(
        id=f"tau2-{domain}-{task['id']}", prompt=[],
        user=_user_spec(scen, len(calls) + len(messages)), verifier=verifier,
        reference={"calls": calls, "answer": answer, "messages": messages},
        difficulty=len(calls),
        meta={"source": "tau2-bench", "family": "general", "category": f"tau2-{domain}", "tau2_id": str(task["id"]),
              "reward_basis": crit.get("reward_basis") or [], "writes": len(writes)})
    return out, ""


def _kinds(v: dict, out: dict[str, int]) -> None:
    if v["kind"] == "composite":
        for p in v["args"]["parts"]:
            _kinds(p, out)
    else:
        out[v["kind"]] = out.get(v["kind"], 0) + 1


# ------------------------------------------------------------------ the import


def import_tau2(path: str | Path, domain: str, out: str | Path, *, tasks_file: str | None = None,
                split: str | None = None, nl_assertions: str = "report", python: str | None = None) -> ImportReport:
    """Import tau2-bench domain ``domain`` from the checkout at ``path`` as a pack at ``out``.

    tasks_file: the domain's task file to read (default ``tasks.json``; a path, or a name in the domain's data
        folder such as ``tasks_small.json``).
    split: keep the tasks of this split of ``split_<tasks file>.json`` (tau2's ``train``/``test``/``base``).
    nl_assertions: ``report`` (default): tau2's LLM-judged assertions are a rubric part the host's judge grades
        and reports while the deterministic parts decide the reward, so packs score offline; ``require``: the
        rubric must pass too (reward 0 until a judge grades it, as tau2 scores it).
    python: the interpreter that runs the domain's code once at import (default: envgen's own; needs pydantic 2).
    """
    if nl_assertions not in NL_MODES:
        raise ImportSourceError(f"--nl-assertions {nl_assertions!r}: expected one of {', '.join(NL_MODES)}")
    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise ImportSourceError(f"{root}: no such directory (pass the root of a tau2-bench checkout)")
    src, data = _domain_dirs(root, domain)
    raw_tasks = _tasks(data, tasks_file, split)
    policy = _policy(data)
    db = _database(data)
    work = Path(tempfile.mkdtemp(prefix="envgen-tau2-"))
    try:
        env, hidden = work / "env", work / "hidden"
        env.mkdir()
        hidden.mkdir()
        _write_env(env, src, domain, db)
        described = _describe(env, python or sys.executable, f"{src} with {data}")
        (env / "tools.py").write_text(_tools_py(domain, described), encoding="utf-8")
        tools = {t["name"]: t for t in described}
        tasks, skipped, kinds = [], {}, {}
        for t in raw_tasks:
            task, why = _convert(t, domain, tools, nl_assertions)
            if task is None:
                skipped[str(t["id"])] = why
                continue
            tasks.append(task)
            _kinds(task.verifier.model_dump(), kinds)
        if not tasks:
            first = next(iter(skipped.items()), ("", "the task file is empty"))
            raise ImportSourceError(f"{data}: no task of domain {domain!r} can be imported (task {first[0]}: {first[1]})")
        manifest = packmod.Manifest(
            name=f"tau2-{domain}", family="general", category=f"tau2-{domain}",
            description=f"tau2-bench's {domain} domain, imported from a checkout: the domain's own tools on its JSON "
                        "database, its policy, and its tasks with a simulated user.",
            instructions=policy, tools=[t["schema"] for t in described],
            agent_first=True, greeting=GREETING, user=USER_DEFAULTS,
            limits=packmod.Limits(max_turns=60, step_timeout_s=20.0, memory_mb=2048),
            provenance=packmod.Provenance(generator="envgen import tau2",
                                          sources=[f"tau2-bench/{domain}", f"tasks:{tasks_file or 'tasks.json'}"
                                                   + (f"@{split}" if split else "")]))
        pack = packmod.save(packmod.Pack(manifest, tasks), out, env_from=env, hidden_from=hidden)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return ImportReport(pack=pack, domain=domain, tasks=len(tasks), skipped=skipped, kinds=kinds,
                        write_tools=sorted(n for n, t in tools.items() if t["mutates"]))

"""The SWE pack: one validated task per pack, and export back to SWE-bench JSONL.

One task per pack because a pack has one image and one ``env/`` the agent can read: a second task of
the same repository at a later commit would carry the first task's fix in its snapshot. The image
layers keep this cheap: every task of a repository version shares the environment layers, and a task
adds only its snapshot's git data and the tools (see ``environment``).

A pack holds::

    env/tools.py      bash, view_file, replace_in_file, write_file, submit (envs/code/env/tools.py)
    env/code.json     repository layout, the snapshot commit, interpreter and import roots (no secrets)
    env/repo.git/     the snapshot: one commit, the base commit's tree (checked out at every reset)
    env/Dockerfile    the repository environment's install steps over the family image
    hidden/test.patch the tests that judge the episode, applied only after it

The verifier (kind ``tests``) rebuilds the repository from the pristine snapshot, applies the submitted
patch, restores every test-infrastructure file to base + hidden test patch, runs the task's test files
with exactly the pytest plugins validation recorded (``plugins`` in the verifier's args) and gives 1
only if every FAIL_TO_PASS and PASS_TO_PASS test passes.
The reference (oracle) submits the gold patch through the ``submit`` tool.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable

from ...errors import InputError
from ...pack.format import Limits, Manifest, Pack, Provenance, Task, load, save
from ...paths import bundled
from ...sandbox.local import describe_tools
from .candidates import Candidate, split_files
from .repo_image import make_snapshot, pack_dockerfile
from .lang import Recipe
from .execution import Validation

SUBMIT = "submit"
TEST_PATCH = "test.patch"
TWINS = "twins.json"
"""hidden/: the test files of the twin checks validation made (``envgen_verifiers.twins``), written over the
staged tests; the verifier's ``twins`` argument says which copies are real and which must fail."""
CATEGORY_PREFIX = "swe"
DEFAULT_LIMITS = dict(max_turns=100, step_timeout_s=150.0, episode_timeout_s=3600.0, memory_mb=2048, cpus=1.0,
                      output_limit=16_384)

PROMPT = """You are working in the repository {repo}, checked out at /work/repo (your tools run there).

Resolve the issue below by changing the repository's code. Tests that check the fix exist but are hidden
from you; do not modify existing tests or test configuration. You can run commands, read and edit files.
When you are done, call `submit` to hand in your changes.

<issue>
{problem}
</issue>"""


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:80] or "task"


def files_after(view_files: Iterable[str], test_patch: str) -> set[str]:
    """The repository's files once the test patch is applied (new files in, deleted files out)."""
    after = set(view_files)
    for path, section in split_files(test_patch):
        if "\n+++ /dev/null" in section or section.startswith("+++ /dev/null"):
            after.discard(path)
        else:
            after.add(path)
    return after


def stage_pack(cand: Candidate, recipe: Recipe, test_files: list[str], dest: Path, *,
               limits: dict[str, Any] | None = None, provenance: Provenance | None = None) -> Pack:
    """Write the task's pack (test lists still empty) to ``dest``; validation fills them in (``finalize``)."""
    with tempfile.TemporaryDirectory(prefix="envgen-code-stage-") as tmp:
        env, hidden = Path(tmp) / "env", Path(tmp) / "hidden"
        env.mkdir()
        hidden.mkdir()
        shutil.copyfile(bundled("envs") / "code" / "env" / "tools.py", env / "tools.py")
        snap = make_snapshot(cand.repo_path, cand.base_commit, env / "repo.git",
                             message=f"{cand.repo} at {cand.base_commit}")
        (env / "code.json").write_text(json.dumps({
            "repo": "repo", "git_dir": "repo.git", "base": snap, "language": recipe.language,
            "python": recipe.python, "pythonpath": recipe.pythonpath, "framework": recipe.framework,
            "options": recipe.options},
            indent=2) + "\n")
        (env / "Dockerfile").write_text(pack_dockerfile(recipe))
        (hidden / TEST_PATCH).write_text(cand.test_patch, encoding="utf-8", errors="surrogateescape")
        schemas = describe_tools(env)
        lim = Limits(**{**DEFAULT_LIMITS, **(limits or {})})
        title = cand.meta.get("title") or cand.meta.get("subject") or \
            (cand.problem_statement.splitlines() or [cand.instance_id])[0]
        manifest = Manifest(
            name=slug(cand.instance_id), family="code", category=f"{CATEGORY_PREFIX}-{recipe.language}",
            description=f"{cand.repo}: {title}"[:300], tools=schemas, submit_tool=SUBMIT, limits=lim,
            image={"base": recipe.image_base}, provenance=provenance or Provenance(generator="envgen.families.code"))
        hunks = sum(1 for line in cand.gold_patch.splitlines() if line.startswith("@@"))
        task = Task(
            id=cand.instance_id,
            prompt=[{"role": "user", "content": PROMPT.format(repo=cand.repo, problem=cand.problem_statement)}],
            verifier={"kind": "tests", "args": {
                "base": snap, "framework": recipe.framework, "options": recipe.options, "files": test_files,
                "python": recipe.python,
                "pythonpath": recipe.pythonpath, "test_patch": TEST_PATCH, "timeout_s": 300,
                "submit_tool": SUBMIT, "FAIL_TO_PASS": [], "PASS_TO_PASS": []}},
            reference={"calls": [{"tool": SUBMIT, "args": {"patch": cand.gold_patch}}], "answer": "",
                       "patch": cand.gold_patch},
            difficulty=max(1, hunks),
            meta={"source": cand.source, "language": cand.language, "created_at": cand.created_at,
                  "repo": cand.repo, "instance_id": cand.instance_id, "base_commit": cand.base_commit,
                  "snapshot_commit": snap, "problem_statement": cand.problem_statement,
                  "hints_text": cand.hints_text, "code_files": cand.code_files, "test_files": cand.test_files,
                  "environment": {"key": recipe.key, "image_base": recipe.image_base, "steps":
                                  [s.__dict__ for s in recipe.steps], "notes": recipe.notes},
                  **{k: v for k, v in cand.meta.items() if v is not None}})
        return save(Pack(manifest, [task]), dest, env_from=env, hidden_from=hidden)


def run_timeout(validation: Validation) -> int:
    """Per-run test timeout for the verifier: generous against the slowest validated run (never below 60 s)."""
    return int(max(60, math.ceil(validation.max_gold_seconds * 5) + 30))


def finalize(pack: Pack, validation: Validation, environment: dict[str, Any] | None = None, *,
             meta: dict[str, Any] | None = None) -> Pack:
    """Write the validated test lists, timeouts and the validation record (and ``meta``, e.g. the spec
    judge's ``spec``) into the pack (in place)."""
    task = pack.tasks[0]
    args = dict(task.verifier.args)
    args["FAIL_TO_PASS"], args["PASS_TO_PASS"] = validation.FAIL_TO_PASS, validation.PASS_TO_PASS
    args["plugins"] = [p["name"] for p in validation.plugins]
    args["timeout_s"] = run_timeout(validation)
    twins = pack.hidden_dir / TWINS
    if validation.twins:
        # the planned test files go to hidden/ (the verifier writes them into the tree anyway); which copy
        # is real goes to the verifier's arguments only: code in the test process can read hidden/, not those
        plan = validation.twins["plan"]
        twins.write_text(json.dumps({"files": plan["files"]}, sort_keys=True) + "\n", encoding="utf-8")
        args["twins"] = {"files": TWINS, "real": plan["real"], "twins": plan["twins"], "tests": plan["tests"],
                         "expect_failing": validation.twins["expect_failing"]}
    else:
        twins.unlink(missing_ok=True)
        args.pop("twins", None)
    extra, meta = dict(meta or {}), dict(task.meta)
    meta["validation"] = {k: v for k, v in validation.to_dict().items()
                          if k not in ("FAIL_TO_PASS", "PASS_TO_PASS", "instance_id", "log_tail", "twins")}
    if validation.twins:
        meta["validation"]["twin_checks"] = len(validation.twins["expect_failing"])
    if environment:
        meta["environment"] = {**meta.get("environment", {}), **environment}
    meta.update(extra)
    new = task.model_copy(update={"verifier": task.verifier.model_copy(update={"args": args}), "meta": meta})
    manifest = pack.manifest.model_copy(deep=True)
    manifest.limits.step_timeout_s = max(manifest.limits.step_timeout_s, float(args["timeout_s"] + 30))
    return save(Pack(manifest, [new], pack.root), pack.root)


# ---------------------------------------------------------------- SWE-bench export


def code_packs(path: str | Path) -> list[Pack]:
    """A code pack, or every code pack directly inside a build's output folder."""
    root = Path(path)
    if (root / "pack.json").is_file():
        packs = [load(root)]
    elif root.is_dir():
        packs = [load(d) for d in sorted(root.iterdir()) if (d / "pack.json").is_file()]
    else:
        raise InputError(f"{root}: neither a pack nor a folder of packs")
    packs = [p for p in packs if p.manifest.family == "code"]
    if not packs:
        raise InputError(f"{root}: no code packs (family 'code') here")
    return packs


def harness_id(test_id: str) -> str:
    """The key SWE-bench's harness files a pytest test's result under: ``parse_log_pytest`` splits each
    ``PASSED <id>`` / ``FAILED <id> - <message>`` line on whitespace and keeps the second word, so an id
    with spaces in its parameters (``test_x[assert statement not on own line]``) is graded as its first
    word (``test_x[assert``)."""
    words = test_id.split()
    return words[0] if words else test_id


def harness_lists(f2p: list[str], p2p: list[str]) -> tuple[list[str], list[str]]:
    """FAIL_TO_PASS and PASS_TO_PASS as keys the harness can grade (``harness_id``), each once, in order.
    Where two tests' ids cut to one key the harness sees only one of their lines: a key that names a
    FAIL_TO_PASS test stays in FAIL_TO_PASS only."""
    f2p_keys = list(dict.fromkeys(harness_id(t) for t in f2p))
    taken = set(f2p_keys)
    return f2p_keys, [k for k in dict.fromkeys(harness_id(t) for t in p2p) if k not in taken]


def swebench_row(pack: Pack, task: Task, *, lists_as_strings: bool = True, exact_ids: bool = False) -> dict[str, Any]:
    """One SWE-bench instance from a code task: every field SWE-bench's harness reads, and for a task built
    from a SWE-bench file every field that file had (texts verbatim, extra fields included); the test
    lists are the validated ones. A pytest task's FAIL_TO_PASS/PASS_TO_PASS hold the keys SWE-bench's
    grader matches (``harness_lists``; ``exact_ids``: envgen's ids as they are) and ``envgen_FAIL_TO_PASS``/
    ``envgen_PASS_TO_PASS`` envgen's exact test ids."""
    meta = task.meta
    args = task.verifier.args
    sweb = meta.get("swebench") or {}
    test_patch = (pack.hidden_dir / args.get("test_patch", TEST_PATCH)).read_text(encoding="utf-8",
                                                                                   errors="surrogateescape")
    exact_f2p, exact_p2p = list(args.get("FAIL_TO_PASS") or []), list(args.get("PASS_TO_PASS") or [])
    pytest = args.get("framework", "pytest") == "pytest"
    f2p, p2p = harness_lists(exact_f2p, exact_p2p) if pytest and not exact_ids else (exact_f2p, exact_p2p)
    env = meta.get("environment") or {}

    def text(name: str) -> str:
        value = sweb.get(name)
        return value if isinstance(value, str) else meta.get(name) or ""

    row = {
        "instance_id": meta.get("instance_id", task.id), "repo": meta.get("repo", ""),
        "base_commit": meta.get("base_commit", ""), "patch": task.reference.patch or "", "test_patch": test_patch,
        "problem_statement": text("problem_statement"), "hints_text": text("hints_text"),
        "created_at": text("created_at"),
        "version": sweb["version"] if sweb.get("version") is not None else env.get("key", ""),
        "environment_setup_commit": sweb["environment_setup_commit"] if sweb.get("environment_setup_commit")
        is not None else meta.get("base_commit", ""),
        "FAIL_TO_PASS": json.dumps(f2p) if lists_as_strings else f2p,
        "PASS_TO_PASS": json.dumps(p2p) if lists_as_strings else p2p,
    }
    if meta.get("language") not in (None, "python"):
        row["language"] = meta["language"]
    if pytest and not exact_ids:
        row["envgen_FAIL_TO_PASS"] = json.dumps(exact_f2p) if lists_as_strings else exact_f2p
        row["envgen_PASS_TO_PASS"] = json.dumps(exact_p2p) if lists_as_strings else exact_p2p
    for k, v in (meta.get("extra") or {}).items():
        if k not in EXACT_COLUMNS:  # an imported export's exact ids are recomputed above, never copied
            row.setdefault(k, v)
    return row


EXACT_COLUMNS = frozenset({"envgen_FAIL_TO_PASS", "envgen_PASS_TO_PASS"})


MULTI_SWE_DERIVED = frozenset({"f2p_tests", "p2p_tests", "n2p_tests", "s2p_tests", "fixed_tests", "run_result",
                               "test_patch_result", "fix_patch_result", "FAIL_TO_PASS", "PASS_TO_PASS", "patch",
                               *EXACT_COLUMNS})
"""Fields an export recomputes from the validated task instead of copying from the imported row."""
FORMATS = ("swebench", "multi-swe-bench")


def _result(passed: list[str], failed: list[str]) -> dict[str, Any]:
    return {"passed_count": len(passed), "failed_count": len(failed), "skipped_count": 0,
            "passed_tests": passed, "failed_tests": failed, "skipped_tests": []}


def multi_swe_row(pack: Pack, task: Task) -> dict[str, Any]:
    """One Multi-SWE-bench instance from a code task (the fields its harness's ``Dataset`` reads).

    The test maps come from validation: ``f2p_tests`` failed with the test patch and pass with the fix,
    ``p2p_tests`` pass in both. envgen never runs the base without the test patch, so ``run_result`` and
    each test's ``run`` repeat the test-patch run. A task imported from Multi-SWE-bench gets its original
    fields back (title, body, resolved_issues, ...), with the validated lists."""
    sweb = swebench_row(pack, task, lists_as_strings=False, exact_ids=True)  # its own parsers' ids
    meta = task.meta
    extra = dict(meta.get("extra") or {})
    ids = (meta.get("swebench") or {}).get("multi_swe_bench") or {}
    owner, _, name = sweb["repo"].partition("/")
    f2p, p2p = sweb["FAIL_TO_PASS"], sweb["PASS_TO_PASS"]
    number = ids.get("number", meta.get("pull_number") or meta.get("issue") or 0)
    title, _, body = sweb["problem_statement"].partition("\n")
    row = {
        "org": ids.get("org", owner), "repo": ids.get("repo", name or owner), "number": number,
        "state": "closed", "title": extra.get("title", meta.get("title") or title.strip()),
        "body": extra.get("body", body.strip()),
        "base": extra.get("base") or {"label": f"{owner}:{sweb['base_commit'][:12]}", "ref": sweb["base_commit"],
                                      "sha": sweb["base_commit"]},
        "resolved_issues": extra.get("resolved_issues") or [{"number": meta.get("issue") or number,
                                                             "title": title.strip(), "body": body.strip()}],
        "fix_patch": sweb["patch"], "test_patch": sweb["test_patch"],
        "fixed_tests": {t: {"run": s, "test": s, "fix": "PASS"} for t, s in
                        [*((t, "FAIL") for t in f2p), *((t, "PASS") for t in p2p)]},
        "p2p_tests": {t: {"run": "PASS", "test": "PASS", "fix": "PASS"} for t in p2p},
        "f2p_tests": {t: {"run": "FAIL", "test": "FAIL", "fix": "PASS"} for t in f2p},
        "s2p_tests": {}, "n2p_tests": {},
        "run_result": _result(p2p, f2p), "test_patch_result": _result(p2p, f2p),
        "fix_patch_result": _result(sorted(f2p + p2p), []),
        "instance_id": sweb["instance_id"], "lang": meta.get("language") or "python",
    }
    for k, v in extra.items():
        if k not in MULTI_SWE_DERIVED:
            row.setdefault(k, v)
    return row


def export_swebench(path: str | Path, out: str | Path | None = None, *, lists_as_strings: bool = True,
                    format: str = "swebench") -> list[dict]:
    """SWE-bench (or Multi-SWE-bench, ``format``) JSONL rows of a code pack (or a folder of them); written to
    ``out`` when given."""
    if format not in FORMATS:
        raise InputError(f"unknown export format {format!r}; use {' or '.join(FORMATS)}")
    if format == "multi-swe-bench":
        rows = [multi_swe_row(p, t) for p in code_packs(path) for t in p.tasks]
    else:
        rows = [swebench_row(p, t, lists_as_strings=lists_as_strings) for p in code_packs(path) for t in p.tasks]
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.tmp")
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        tmp.replace(out)
    return rows

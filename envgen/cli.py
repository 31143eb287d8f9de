"""The `envgen` command line (typer + rich).

Flags > ENVGEN_* environment variables > defaults. Errors a user can cause print one line and exit 2
(`--debug` shows the traceback). `--json` prints machine-readable output on stdout instead of tables.
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, List, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .errors import EnvgenError

app = typer.Typer(help="Build, check and run verifiable tool-using RL environments.", no_args_is_help=True,
                  pretty_exceptions_enable=False, add_completion=False)
image_app = typer.Typer(help="Docker images: offline base images and pack images.", no_args_is_help=True)
sandbox_app = typer.Typer(help="Sandbox housekeeping.", no_args_is_help=True)
app.add_typer(image_app, name="image")
app.add_typer(sandbox_app, name="sandbox")

out = Console()
err = Console(stderr=True)
_state = {"debug": False}

SandboxOpt = typer.Option("local", "--sandbox", envvar="ENVGEN_SANDBOX",
                          help="Where tools run: local (subprocess), docker, or auto (docker when an engine answers).")
WorkersOpt = typer.Option(2, "--workers", "-w", envvar="ENVGEN_WORKERS", min=1, help="Parallel sandboxes.")
JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON instead of tables.")


@app.callback()
def _main(debug: bool = typer.Option(False, "--debug", envvar="ENVGEN_DEBUG", help="Show tracebacks on errors.")):
    _state["debug"] = debug


def _emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


@contextmanager
def _progress(label: str, total: int, enabled: bool = True) -> Iterator[Any]:
    """A rich progress bar on stderr; yields a callback(advance) for the library functions."""
    if not enabled:
        yield lambda n=1: None
        return
    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*cols, console=err, transient=False) as bar:
        tid = bar.add_task(label, total=total)
        yield lambda n=1: bar.advance(tid, n)


def _table(title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    t = Table(title=title, title_justify="left")
    for c in columns:
        t.add_column(c)
    for r in rows:
        t.add_row(*[str(x) for x in r])
    return t


# ----------------------------------------------------------------------------- build / validate


@app.command()
def build(
    family: str = typer.Argument(..., help="Family to build, e.g. general."),
    category: str = typer.Option(..., "--category", "-c", help="Category within the family, e.g. travel-planning."),
    out_dir: Path = typer.Option(..., "--out", "-o", help="Directory to write the pack to (replaced atomically)."),
    tasks: Optional[int] = typer.Option(None, "--tasks", "-n", min=1, help="Tasks to propose (default: the category's)."),
    seed: int = typer.Option(0, "--seed", help="Seed; the same seed gives the same pack."),
    workers: int = WorkersOpt,
    sandbox: str = SandboxOpt,
    as_json: bool = JsonOpt,
):
    """Generate a pack offline, gate every task through the red-team, and save what passes."""
    from .build import build as run_build

    with _progress(f"red-team {family}/{category}", total=tasks or 0, enabled=not as_json) as advance:
        report = run_build(family, category, out_dir, tasks=tasks, seed=seed, workers=workers, sandbox=sandbox,
                           progress=advance)
    summary = report.summary()
    if as_json:
        _emit_json(summary)
        return
    out.print(_table(f"built {out_dir}", ["proposed", "kept", "rejected", "seconds"],
                     [[summary["proposed"], summary["kept"], summary["rejected"], f"{summary['seconds']:.1f}"]]))
    hist = summary["difficulty"]
    out.print(_table("difficulty (tool calls)", list(hist), [list(hist.values())]))
    if summary.get("rejected_by_reason"):
        out.print(_table("rejected", ["reason", "tasks"], [[k, v] for k, v in summary["rejected_by_reason"].items()]))


@app.command()
def validate(
    pack: str = typer.Argument(..., help="Pack directory or hf://ORG/NAME."),
    workers: int = WorkersOpt,
    sandbox: str = SandboxOpt,
    as_json: bool = JsonOpt,
):
    """Load a pack, check its content hash, and run the oracle replay + red-team gate on every task."""
    from .build import validate as run_validate
    from .pack import open_pack, verify_hash

    p = open_pack(pack)
    verify_hash(p)
    with _progress(f"validate {p.manifest.name}", total=len(p.tasks), enabled=not as_json) as advance:
        results = run_validate(p, workers=workers, sandbox=sandbox, progress=advance)
    failed = [r for r in results if not r.passed]
    if as_json:
        _emit_json({"pack": str(p.root), "version": p.manifest.version, "tasks": len(results),
                    "passed": len(results) - len(failed),
                    "failed": [{"task": r.task_id, "reason": r.reason} for r in failed]})
    else:
        out.print(_table(f"{p.manifest.name} {p.manifest.version[:19]}", ["tasks", "passed", "failed"],
                         [[len(results), len(results) - len(failed), len(failed)]]))
        if failed:
            out.print(_table("failed tasks", ["task", "reason"], [[r.task_id, r.reason] for r in failed[:50]]))
    if failed:
        raise typer.Exit(1)


# ----------------------------------------------------------------------------- run / ls


@app.command()
def run(
    pack: str = typer.Argument(..., help="Pack directory or hf://ORG/NAME."),
    task: Optional[str] = typer.Option(None, "--task", "-t", help="Task id (default: a seeded choice)."),
    policy: str = typer.Option("oracle", "--policy", "-p", help="oracle (replays the reference) or null."),
    seed: int = typer.Option(0, "--seed"),
    sandbox: str = SandboxOpt,
    as_json: bool = JsonOpt,
):
    """Run one episode through the Gymnasium env and print its transcript."""
    from .gym import PackEnv
    from .policy import format_transcript, make_policy, rollout

    env = PackEnv(pack, sandbox=sandbox)
    try:
        t = rollout(env, make_policy(policy), task_id=task, seed=seed)
    finally:
        env.close()
    if as_json:
        _emit_json(t.to_dict())
    else:
        out.print(format_transcript(t), markup=False, highlight=False)


@app.command("ls")
def ls(
    directory: Path = typer.Argument(Path("."), help="A pack, or a directory holding packs."),
    as_json: bool = JsonOpt,
):
    """List the packs under a directory."""
    from .pack import MANIFEST, load

    if not directory.exists():
        raise EnvgenError(f"{directory}: no such directory")
    roots = [directory] if (directory / MANIFEST).is_file() else sorted(
        p.parent for p in directory.glob(f"*/{MANIFEST}"))
    rows = []
    for root in roots:
        try:
            p = load(root)
        except EnvgenError as e:
            rows.append({"path": str(root), "error": str(e)})
            continue
        m = p.manifest
        rows.append({"path": str(root), "name": m.name, "family": m.family, "category": m.category,
                     "tasks": len(p.tasks), "tools": len(m.tools), "version": m.version})
    if as_json:
        _emit_json(rows)
        return
    if not rows:
        out.print(f"no packs under {directory}")
        return
    out.print(_table(str(directory), ["path", "name", "family/category", "tasks", "tools", "version"],
                     [[r["path"], r.get("name", "[broken] " + r.get("error", "")), f"{r.get('family', '')}/"
                       f"{r.get('category', '')}", r.get("tasks", ""), r.get("tools", ""),
                       r.get("version", "")[:19]] for r in rows]))


@app.command()
def families(as_json: bool = JsonOpt):
    """List the families and categories `envgen build` can generate offline."""
    from .families import categories

    cats = categories()
    if as_json:
        _emit_json([{"family": c.family, "category": c.name, "description": c.description} for c in cats.values()])
        return
    out.print(_table("categories", ["family", "category", "description"],
                     [[c.family, c.name, c.description] for c in cats.values()]))


# ----------------------------------------------------------------------------- docker


@image_app.command("base")
def image_base(
    suite: str = typer.Option("bookworm", "--suite", help="Debian suite: bullseye (3.9), bookworm (3.11), trixie (3.13)."),
    toolchain: List[str] = typer.Option([], "--toolchain", help="Extra toolchain layer: node, go, jdk, gcc, php."),
):
    """Build (or reuse) an offline base image: debootstrap + docker import, tagged by recipe hash."""
    from .images import build_base

    tag = build_base(suite, toolchain, log=lambda m: err.print(m, markup=False, highlight=False))
    out.print(tag)


@image_app.command("build")
def image_build(pack: Path = typer.Argument(..., help="Pack directory.")):
    """Build the pack's image (base -> family -> pack) and record its tag and digest in pack.json."""
    from .images import build_pack_image
    from .pack import load

    p = build_pack_image(load(pack), log=lambda m: err.print(m, markup=False, highlight=False))
    out.print(f"{p.manifest.image.tag} {p.manifest.image.digest}")


@sandbox_app.command("gc")
def sandbox_gc(all_: bool = typer.Option(False, "--all", help="Also remove containers of live envgen processes.")):
    """Remove leftover envgen sandbox containers (e.g. after a killed process)."""
    from .sandbox.docker import gc

    out.print(f"removed {gc(all=all_)} container(s)")


# ----------------------------------------------------------------------------- hub


@app.command()
def publish(
    pack: Path = typer.Argument(..., help="Pack directory."),
    repo: str = typer.Option(..., "--repo", help="Hub dataset repository, ORG/NAME."),
    private: bool = typer.Option(False, "--private"),
    revision: Optional[str] = typer.Option(None, "--revision", help="Branch to publish to (default main)."),
    dry_run: Optional[Path] = typer.Option(None, "--dry-run", help="Write the exact upload folder here and stop."),
    as_json: bool = JsonOpt,
):
    """Publish a pack as a Hugging Face dataset (uses HF_TOKEN); an unchanged pack uploads nothing."""
    from .hub import publish as run_publish
    from .pack import load

    res = run_publish(load(pack), repo, private=private, revision=revision, dry_run=dry_run)
    if as_json:
        _emit_json(res.to_dict())
    else:
        out.print(res.describe(), markup=False, highlight=False)


@app.command()
def pull(ref: str = typer.Argument(..., help="ORG/NAME[@REVISION]"), as_json: bool = JsonOpt):
    """Download a pack from the Hub into the Hugging Face cache, verify its hash, and print its path."""
    from .hub import pull as run_pull

    p = run_pull(ref.removeprefix("hf://"))
    if as_json:
        _emit_json({"path": str(p.root), "name": p.manifest.name, "version": p.manifest.version, "tasks": len(p.tasks)})
    else:
        out.print(str(p.root))


def main() -> None:
    try:
        app()
    except EnvgenError as e:
        if _state["debug"]:
            raise
        err.print(f"error: {e}", markup=False, highlight=False)
        sys.exit(2)
    except KeyboardInterrupt:
        err.print("interrupted", markup=False)
        sys.exit(130)


if __name__ == "__main__":
    main()

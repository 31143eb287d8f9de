"""The `envgen` command line (typer + rich).

Flags > ENVGEN_* environment variables > defaults. Every envgen error prints one line, its category first
(`error:` for input a user can fix, exit 2; `service error:`, `sandbox error:`, `build error:`, `judge error:`,
exit 1; see envgen/errors.py); `--debug` shows the traceback. `--json` prints machine-readable output on stdout instead of tables.
"""

from __future__ import annotations

import json
import os
import inspect
import signal
import sys
import types
import typing
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterator, List, Optional

import typer
import typer.core
from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)
from rich.table import Table

from .errors import EnvgenError, InputError
from .passcheck.config import CheckConfig, EvalConfig

app = typer.Typer(help="Build, check and run verifiable tool-using RL environments.", no_args_is_help=True,
                  pretty_exceptions_enable=False, add_completion=False)
image_app = typer.Typer(help="Docker images: offline base images and pack images.", no_args_is_help=True)
sandbox_app = typer.Typer(help="Sandbox housekeeping.", no_args_is_help=True)
app.add_typer(image_app, name="image")
app.add_typer(sandbox_app, name="sandbox")
export_app = typer.Typer(help="Export packs to other formats.", no_args_is_help=True)
app.add_typer(export_app, name="export")
import_app = typer.Typer(help="Import an existing suite as a pack: `envgen import tau2 PATH --domain retail`.",
                         no_args_is_help=True)
app.add_typer(import_app, name="import")
corpus_app = typer.Typer(help="Corpora for the search family: index them, mine long-tail entities.", no_args_is_help=True)
app.add_typer(corpus_app, name="corpus")

out = Console()
err = Console(stderr=True)
_state = {"debug": False}

SandboxOpt = typer.Option("local", "--sandbox", envvar="ENVGEN_SANDBOX",
                          help="Where tools run: local (subprocess), docker, auto (docker when an engine answers), "
                          "or remote:http://HOST:PORT (an envgen serve; token in ENVGEN_SERVE_TOKEN).")
WorkersOpt = typer.Option(2, "--workers", "-w", envvar="ENVGEN_WORKERS", min=1, help="Parallel sandboxes.")
JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON instead of tables.")
AllowModifiedOpt = typer.Option(False, "--allow-modified", help="Open a pack edited since it was saved: re-hash it "
                                "(pack.json gets the new version) instead of refusing it.")


def _say(message: str) -> None:
    err.print(message, markup=False, highlight=False, soft_wrap=True)


def _version() -> str:
    """The installed distribution's version (package metadata), else the source tree's."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("envgen")
    except PackageNotFoundError:
        from . import __version__

        return __version__


def _print_version(value: bool) -> None:
    if value:
        out.print(f"envgen {_version()}", markup=False, highlight=False)
        raise typer.Exit()


@app.callback()
def _main(debug: bool = typer.Option(False, "--debug", envvar="ENVGEN_DEBUG", help="Show tracebacks on errors."),
          _v: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                  help="Print the version and exit.")):
    _state["debug"] = debug


def _emit_json(obj: Any) -> None:
    """Write the command's one JSON document to the real stdout (see ``_json_stdout``)."""
    stream = _state.get("stdout") or sys.stdout
    stream.write(json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")
    stream.flush()


@contextmanager
def _json_stdout(enabled: bool) -> Iterator[None]:
    """With --json, send everything else written to stdout (library prints, TRL's logs, child processes) to
    stderr, so stdout holds only the JSON document."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    _state["stdout"] = os.fdopen(saved, "w", encoding="utf-8", closefd=True)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        _state.pop("stdout").close()


@contextmanager
def _progress(label: str, total: int | None, enabled: bool = True) -> Iterator[Any]:
    """A rich progress bar on stderr with a known ``total``; yields a callback(advance) for the library functions.

    When the work finishes the bar is filled: steps resumed from an earlier run do not advance it.
    """
    if not enabled:
        yield lambda n=1: None
        return
    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
            TimeElapsedColumn())
    with Progress(*cols, console=err, transient=False) as bar:
        tid = bar.add_task(label, total=total)
        yield lambda n=1: bar.advance(tid, n)
        if total is not None:
            bar.update(tid, completed=total)


def _table(title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    t = Table(title=title, title_justify="left")
    for c in columns:
        t.add_column(c)
    for r in rows:
        t.add_row(*[str(x) for x in r])
    return t


# ----------------------------------------------------------------------------- build / validate


class _BuildGroup(typer.core.TyperGroup):
    """``envgen build FAMILY``: one subcommand per family (envgen.build.family), made from the family's options
    model when it is asked for, so ``envgen build general`` imports one family and a new family needs no CLI
    edit."""

    def list_commands(self, ctx: Any) -> list[str]:
        from .build.family import family_names

        return list(family_names())

    def get_command(self, ctx: Any, name: str) -> Any:
        from .build.family import get_family

        return _family_command(get_family(name))  # an unknown family is an InputError naming the known ones


def _annotation(annotation: Any) -> tuple[Any, bool]:
    """(the annotation typer gets, is a flag) for an options-model field: X | None -> Optional[X], list[X] ->
    List[X], a Literal -> str (pydantic checks the choice and names the flag)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    optional = typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1
    base = args[0] if optional else annotation
    if typing.get_origin(base) is list:
        return List[typing.get_args(base)[0]], False
    if typing.get_origin(base) is typing.Literal:
        base = str
    return (base, True) if base is bool else (Optional[base], False)


def _family_command(family: Any) -> Any:
    """A typer command whose flags are ``family.Options``' fields (help: each field's description)."""
    params = []
    for doc in family.describe_options():
        annotation, is_flag = _annotation(family.Options.model_fields[doc.name].annotation)
        if is_flag:
            flag = doc.flags[0].removeprefix("--")
            option = typer.Option(doc.default, f"--{flag}/--no-{flag}", *doc.flags[1:], help=doc.description,
                                  envvar=doc.envvar)
        else:
            shown = doc.default not in (None, []) and not doc.required and str(doc.default)
            option = typer.Option(... if doc.required else None, *doc.flags, help=doc.description, envvar=doc.envvar,
                                  show_default=shown or False, show_envvar=doc.envvar is not None)
        params.append(inspect.Parameter(doc.name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation))
    params.append(inspect.Parameter("as_json", inspect.Parameter.KEYWORD_ONLY, default=JsonOpt, annotation=bool))

    def run(as_json: bool = False, **values: Any) -> None:
        options = family.options(**{k: v for k, v in values.items() if v is not None and v != []})
        label, total = family.progress_total(options)
        with _progress(label, total, enabled=not as_json) as advance:
            report = family.build(options, progress=advance, log=_say)
        if as_json:
            _emit_json(report.summary())
        else:
            _print_build(report.summary())

    run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]  # typer reads the flags from it
    sub = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    sub.command(family.name, no_args_is_help=True, short_help=family.description,
                help=f"{family.description}\n\nGenerate tasks, gate every one through the red-team, and save the "
                     f"pack(s) of those that pass.")(run)
    return typer.main.get_command(sub)


build_app = typer.Typer(cls=_BuildGroup, no_args_is_help=True, help="Generate a pack: `envgen build FAMILY --help` "
                        "shows a family's options; `envgen families` lists families and categories.")
app.add_typer(build_app, name="build")


def _print_build(summary: dict[str, Any]) -> None:
    out.print(_table(f"built {summary['out']}", ["proposed", "kept", "rejected", "seconds"],
                     [[summary["proposed"], summary["kept"], summary["rejected"], f"{summary['seconds']:.1f}"]]))
    if summary.get("rejected_by_reason"):
        out.print(_table("rejected", ["reason", "tasks"], [[k, v] for k, v in summary["rejected_by_reason"].items()]))
    if summary["difficulty"]:
        out.print(_table("difficulty (tool calls)", list(summary["difficulty"]), [list(summary["difficulty"].values())]))
    if summary["packs"] != ["."]:
        for p in summary["packs"]:
            out.print(f"pack: {Path(summary['out']) / p}", markup=False, highlight=False)
    llm = summary["details"].get("llm")
    if llm:
        out.print(_usage_table(llm))


def _usage_table(llm: dict[str, Any], title: str = "LLM usage") -> Table:
    """The model usage of a build: this session's calls (paid and replayed) and, where the store gives it, what
    the run has spent over all its sessions. Calls whose endpoint sent no usage make the tokens and cost
    lower bounds, and the table says so instead of showing them as exact."""
    rows = []
    for label, u in (("this session", llm.get("session")), ("whole run", llm.get("spent"))):
        if not u:
            continue
        unknown = int(u.get("unknown") or 0)
        mark = "+ unknown" if unknown else ""
        rows.append([label, u.get("calls", 0), u.get("cached_calls", "-"), f"{u.get('prompt_tokens', 0)} {mark}".strip(),
                     f"{u.get('completion_tokens', 0)} {mark}".strip(), f"${float(u.get('cost', 0)):.4f} {mark}".strip(),
                     u.get("errors", "-"), unknown or "-"])
    return _table(title, ["", "paid calls", "replayed", "prompt tokens", "completion tokens", "cost", "errors",
                          "calls without usage"], rows)


@app.command()
def validate(
    pack: str = typer.Argument(..., help="Pack directory or hf://ORG/NAME."),
    workers: int = WorkersOpt,
    sandbox: str = SandboxOpt,
    allow_modified: bool = AllowModifiedOpt,
    as_json: bool = JsonOpt,
):
    """Load a pack, check its content hash, and run the oracle replay + red-team gate on every task."""
    from .build.offline import validate_pack
    from .pack.resolve import open_pack

    p = open_pack(pack, allow_modified=allow_modified, log=_say)
    with _progress(f"validate {p.manifest.name}", total=len(p.tasks), enabled=not as_json) as advance:
        results = validate_pack(p, workers=workers, sandbox=sandbox, progress=advance)
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


# ----------------------------------------------------------------------------- check / eval

PolicyHelp = ("oracle, null, openai:MODEL[?base_url=..&temperature=..&top_p=..&top_k=..&max_tokens=..&concurrency=..] "
              "or hf:PATH[?...]")
JudgeOpt = typer.Option(None, "--judge", envvar="ENVGEN_JUDGE",
                        help="Grade rubric tasks with an LLM judge: MODEL[?base_url=URL&votes=K].")
UserOpt = typer.Option(None, "--user", envvar="ENVGEN_USER",
                       help="Simulated user of tasks with a user spec: scripted or openai:MODEL[?base_url=URL&temperature=T] "
                            "(default: the pack's user_model, else scripted).")


def _opt(model: Any, name: str, *flags: str, **kw: Any) -> Any:
    """A typer option for a config field: its default and help come from where the field is defined."""
    f = model.model_fields[name]
    return typer.Option(f.default, *(flags or ("--" + name.replace("_", "-"),)), help=f.description, **kw)


@app.command()
def check(
    pack: str = typer.Argument(..., help="Pack directory or hf://ORG/NAME."),
    policy: str = typer.Option(..., "--policy", "-p", help=PolicyHelp),
    k: int = _opt(CheckConfig, "k", "--k"),
    keep: str = _opt(CheckConfig, "keep"),
    out_dir: Optional[Path] = _opt(CheckConfig, "out", "--out", "-o"),
    write_stats: bool = _opt(CheckConfig, "write_stats"),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Pass-rate histogram PNG (default: PACK-passrates.png)."),
    workers: int = _opt(CheckConfig, "workers", "--workers", "-w", envvar="ENVGEN_WORKERS"),
    executor: str = _opt(CheckConfig, "executor", envvar="ENVGEN_EXECUTOR"),
    ray_address: Optional[str] = _opt(CheckConfig, "ray_address", envvar="RAY_ADDRESS"),
    sandbox: str = _opt(CheckConfig, "sandbox", envvar="ENVGEN_SANDBOX"),
    seed: int = _opt(CheckConfig, "seed"),
    store: Optional[str] = _opt(CheckConfig, "store_url", "--store", envvar="ENVGEN_STORE"),
    pass_threshold: float = _opt(CheckConfig, "pass_threshold"),
    judge: Optional[str] = _opt(CheckConfig, "judge", envvar="ENVGEN_JUDGE"),
    user: Optional[str] = _opt(CheckConfig, "user", envvar="ENVGEN_USER"),
    allow_modified: bool = AllowModifiedOpt,
    as_json: bool = JsonOpt,
):
    """The pass check: k rollouts per task, stopped as soon as each keep/drop decision is known.

    Per-task stats (stats.check.POLICY) go into the --out pack, and into PACK only with --write-stats. A rerun
    resumes from the rollouts recorded for the same pack content, policy, sandbox backend, image and seed.
    """
    from .passcheck.check import check as run_check_cmd
    from .pack.resolve import open_pack

    config = CheckConfig.of(None, dict(k=k, keep=keep, out=out_dir, write_stats=write_stats, workers=workers,
                                       executor=executor, ray_address=ray_address, sandbox=sandbox, seed=seed,
                                       store_url=store, pass_threshold=pass_threshold, judge=judge,
                                       user=user))
    p = open_pack(pack, allow_modified=allow_modified, log=_say)
    config.plot = plot or p.root.parent / f"{p.root.name}-passrates.png"
    with _progress(f"check {p.manifest.name}: rollouts (at most tasks x k; stops early)", total=len(p.tasks) * k,
                   enabled=not as_json) as advance:
        report = run_check_cmd(str(p.root), policy, config, progress=advance)
    summary = report.summary()
    if as_json:
        summary["tasks_stats"] = report.stats
        _emit_json(summary)
        return
    rows = [[tid, s["rollouts"], s["passes"], s["pass_rate"], f"{s['pass_rate_ci95'][0]:.2f}-{s['pass_rate_ci95'][1]:.2f}",
             "keep" if s["kept"] else "drop"] for tid, s in list(report.stats.items())[:40]]
    out.print(_table(f"{p.manifest.name} · {summary['rule']} · k={k}", ["task", "rollouts", "passes", "rate", "95% CI",
                                                                        "decision"], rows))
    if len(report.stats) > 40:
        out.print(f"... {len(report.stats) - 40} more tasks (see --json)")
    out.print(_table("summary", ["tasks", "kept", "dropped", "rollouts", "naive", "resumed", "seconds"],
                     [[summary["tasks"], summary["kept"], summary["dropped"], summary["rollouts"],
                       summary["naive_rollouts"], summary["resumed_rollouts"], summary["seconds"]]]))
    out.print(f"histogram: {summary['plot']}" + (f"\nkept pack: {summary['kept_pack']}" if summary["kept_pack"] else ""))


class _EvalGroup(typer.core.TyperGroup):
    """``envgen eval``: pass@k of policies (``envgen eval PACK --policy P``, the default command, also spelled
    ``envgen eval pass-at-k PACK ...``) or ``envgen eval swebench``: a first argument that names no subcommand
    is the pass@k command's."""

    default_command = "pass-at-k"

    def route(self, args: list[str]) -> list[str]:
        """The arguments with the default command's name put first when they do not start with a subcommand."""
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            return [self.default_command, *args]
        return args

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, self.route(list(args)))


eval_app = typer.Typer(cls=_EvalGroup, no_args_is_help=True, help="Evaluate policies or predictions: `envgen eval "
                       "PACK --policy P` (pass@k) or `envgen eval swebench --predictions FILE DIR`.")
app.add_typer(eval_app, name="eval")


@eval_app.command("pass-at-k")
def eval_(
    pack: str = typer.Argument(..., help="Pack directory or hf://ORG/NAME."),
    policy: List[str] = typer.Option(..., "--policy", "-p", help=PolicyHelp + " (repeat for several)."),
    sample: int = _opt(EvalConfig, "sample"),
    k: int = _opt(EvalConfig, "k", "--k"),
    workers: int = _opt(EvalConfig, "workers", "--workers", "-w", envvar="ENVGEN_WORKERS"),
    executor: str = _opt(EvalConfig, "executor", envvar="ENVGEN_EXECUTOR"),
    ray_address: Optional[str] = _opt(EvalConfig, "ray_address", envvar="RAY_ADDRESS"),
    sandbox: str = _opt(EvalConfig, "sandbox", envvar="ENVGEN_SANDBOX"),
    seed: int = _opt(EvalConfig, "seed"),
    store: Optional[str] = _opt(EvalConfig, "store_url", "--store", envvar="ENVGEN_STORE"),
    pass_threshold: float = _opt(EvalConfig, "pass_threshold"),
    judge: Optional[str] = _opt(EvalConfig, "judge", envvar="ENVGEN_JUDGE"),
    user: Optional[str] = _opt(EvalConfig, "user", envvar="ENVGEN_USER"),
    allow_modified: bool = AllowModifiedOpt,
    as_json: bool = JsonOpt,
):
    """pass@k of one or more policies on a seeded sample of tasks (unbiased estimator)."""
    from .passcheck.check import evaluate
    from .pack.resolve import open_pack

    config = EvalConfig.of(None, dict(sample=sample, k=k, workers=workers, executor=executor, ray_address=ray_address,
                                      sandbox=sandbox, seed=seed, store_url=store, pass_threshold=pass_threshold,
                                      judge=judge, user=user, allow_modified=allow_modified))
    total = len(policy) * min(sample, len(open_pack(pack, allow_modified=allow_modified, log=_say).tasks)) * k
    with _progress("eval (rollouts)", total=total, enabled=not as_json) as advance:
        report = evaluate(pack, policy, config, log=_say, progress=advance)
    if as_json:
        _emit_json(report.summary())
        return
    cols = list(next(iter(report.results.values())))
    out.print(_table(f"pass@k on {len(report.sample)} tasks (k={k})", ["policy", *cols],
                     [[name, *[f"{v:.3f}" for v in r.values()]] for name, r in report.results.items()]))


@eval_app.command("swebench")
def eval_swebench(
    target: Path = typer.Argument(..., help="A code pack, or a `envgen build code` output folder."),
    predictions: Path = typer.Option(..., "--predictions", help="SWE-bench predictions: JSONL (or a JSON list) of "
                                     "{instance_id, model_patch, model_name_or_path}."),
    sandbox: str = typer.Option("docker", "--sandbox", help="docker (each pack's image), or local (this machine's "
                                "Python: results may differ; a warning says so)."),
    run_id: str = typer.Option("envgen", "--run-id", help="Names the report: <model>.<run_id>.json."),
    out_dir: Path = typer.Option(Path("."), "--out", "-o", help="Folder for the report and logs/run_evaluation/."),
    workers: int = typer.Option(1, "--workers", "-w", envvar="ENVGEN_WORKERS", min=1,
                                help="Predictions graded at once (one sandbox each)."),
    as_json: bool = JsonOpt,
):
    """Grade SWE-bench predictions with the packs' own tests verifier; write SWE-bench's run report."""
    from .families.code.swebench_eval import evaluate_predictions, read_predictions

    if sandbox not in ("docker", "local"):
        raise InputError(f"--sandbox {sandbox!r}: use docker or local")
    if sandbox == "local":
        _say("warning: --sandbox local runs the tests with this machine's Python and packages, not the pack's "
             "image: results may differ from a Docker run")
    preds = read_predictions(predictions)
    with _progress("eval swebench", total=len(preds), enabled=not as_json) as advance:
        reports = evaluate_predictions(target, preds, sandbox=sandbox, run_id=run_id, out_dir=out_dir,
                                       workers=workers, log=_say, progress=advance)
    if as_json:
        _emit_json(reports[0] if len(reports) == 1 else reports)
        return
    out.print(_table(f"SWE-bench evaluation ({run_id})", ["model", "total", "submitted", "completed", "resolved",
                                                          "unresolved", "empty patch", "error", "unknown"],
                     [[r["model_name_or_path"], r["total_instances"], r["submitted_instances"],
                       r["completed_instances"], r["resolved_instances"], r["unresolved_instances"],
                       r["empty_patch_instances"], r["error_instances"], len(r["unknown_ids"])] for r in reports]))
    for r in reports:
        out.print(f"report: {r['report_file']}", markup=False, highlight=False)


@app.command()
def train(
    pack: List[str] = typer.Option(..., "--pack", help="Pack directory or hf://ORG/NAME (repeat to train on several)."),
    model: str = typer.Option(..., "--model", help="transformers checkpoint (path or hub id) to start from."),
    config: str = typer.Option("deepseek_v32", "--config", help="YAML config path, or a bundled name (deepseek_v32)."),
    output_dir: Path = typer.Option(Path("runs/envgen-grpo"), "--output-dir", help="Where the model and logs go."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", min=1),
    sandbox: str = SandboxOpt,
    max_concurrency: int = typer.Option(8, "--max-concurrency", min=1, help="Sandboxes working at once per pack."),
    template: str = typer.Option("auto", "--template", help="Thinking-retention template: auto, qwen3, deepseek_v31, deepseek_v32, chatml."),
    overrides: List[str] = typer.Option([], "--set", help="Override a training argument, KEY=VALUE (YAML value), "
                                        "e.g. --set learning_rate=1e-6 --set bf16=false."),
    as_json: bool = JsonOpt,
):
    """GRPO on packs with TRL (DeepSeek-V3.2 preset by default). For several GPUs: accelerate launch rl/train.py."""
    try:
        from .rl import train as run_train
    except ImportError:
        raise InputError("envgen train needs the rl extra: pip install torch==2.13.0 'envgen[rl]'") from None
    import yaml

    extra = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"--set {item!r}: write KEY=VALUE, e.g. --set learning_rate=1e-6")
        extra[key.strip()] = yaml.safe_load(value)
    metrics = run_train(pack, model, config, output_dir=str(output_dir), max_steps=max_steps, sandbox=sandbox,
                        max_concurrency=max_concurrency, template=template, **extra)
    if as_json:
        _emit_json(metrics)
        return
    out.print(_table(f"trained -> {metrics.get('output_dir')}", ["metric", "value"],
                     [[k, v] for k, v in metrics.items() if k != "output_dir"]))


# ----------------------------------------------------------------------------- run / ls


@app.command()
def run(
    pack: str = typer.Argument(..., help="Pack directory or hf://ORG/NAME."),
    task: Optional[str] = typer.Option(None, "--task", "-t", help="Task id (default: a seeded choice)."),
    policy: str = typer.Option("oracle", "--policy", "-p", help="oracle[:FORMAT] (replays the reference), null, "
                               "openai:MODEL?.. or hf:PATH?.."),
    seed: int = typer.Option(0, "--seed"),
    sandbox: str = SandboxOpt,
    judge: Optional[str] = JudgeOpt,
    user: Optional[str] = UserOpt,
    allow_modified: bool = AllowModifiedOpt,
    as_json: bool = JsonOpt,
):
    """Run one episode through the Gymnasium env and print its transcript."""
    from .episodes.gym import PackEnv
    from .pack.resolve import open_pack
    from .policies.builtin import format_transcript, make_policy, rollout

    env = PackEnv(open_pack(pack, allow_modified=allow_modified, log=_say), sandbox=sandbox, judge=judge,
                  user=user)
    try:
        t = rollout(env, make_policy(policy), task_id=task, seed=seed)
    finally:
        env.close()
    if as_json:
        _emit_json(t.to_dict())
    else:
        out.print(format_transcript(t), markup=False, highlight=False)


@app.command()
def serve(
    packs: list[str] = typer.Argument(..., help="Pack directories or hf://ORG/NAME (one of each name)."),
    host: str = typer.Option("127.0.0.1", "--host", envvar="ENVGEN_SERVE_HOST", help="Address to bind."),
    port: int = typer.Option(8000, "--port", envvar="ENVGEN_SERVE_PORT", help="Port to bind."),
    token: Optional[str] = typer.Option(None, "--token", envvar="ENVGEN_SERVE_TOKEN",
                                        help="The bearer token clients must send (default: a new one, printed)."),
    no_token: bool = typer.Option(False, "--no-token", help="Require no token (only on a loopback --host)."),
    sandbox: str = typer.Option("local", "--sandbox", envvar="ENVGEN_SANDBOX",
                                help="Where sessions' tools run: local, docker, or auto."),
    max_sessions: int = typer.Option(8, "--max-sessions", min=1, help="Concurrent sessions (one sandbox each); "
                                     "past it a new connection gets a busy answer."),
    idle_timeout: float = typer.Option(300.0, "--idle-timeout", min=1.0, help="Seconds without a message before "
                                       "a session is closed (its sandbox with it)."),
    pool: bool = typer.Option(True, "--pool/--no-pool", help="Docker: take containers from a warm pool "
                              "(ENVGEN_POOL_SIZE per image)."),
    allow_modified: bool = AllowModifiedOpt,
    as_json: bool = typer.Option(False, "--json", help="Print the address and token as one JSON document, then serve."),
):
    """Serve packs' episodes over the network: OpenEnv sessions (WebSocket /ws) any EnvClient can drive, and the
    remote sandbox backend (--sandbox remote:URL elsewhere). /health is open; /metrics and /ws need the token."""
    from .pack.resolve import open_pack
    from .serve import resolve_token

    token = resolve_token(token, no_token, host)  # refused before the server's (slow) imports
    from .serve.server import serve as run_server

    opened = [open_pack(p, allow_modified=allow_modified, log=_say) for p in packs]
    run_server(opened, host=host, port=port, token=token, no_token=no_token, backend=sandbox,
               max_sessions=max_sessions, idle_timeout_s=idle_timeout, pool=pool, log=_say,
               on_start=_emit_json if as_json else None)


def _find_packs(directory: Path) -> list[Path]:
    """Pack roots at or below ``directory``, sorted; neither hidden folders nor a pack's own files are searched."""
    from .pack.format import MANIFEST

    found = []
    for root, dirs, files in os.walk(directory):
        if MANIFEST in files:
            found.append(Path(root))
            dirs.clear()
            continue
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("__pycache__", "node_modules")]
    return sorted(found)


@app.command("ls")
def ls(
    directory: Path = typer.Argument(Path("."), help="A pack, or a directory searched recursively for packs."),
    as_json: bool = JsonOpt,
):
    """List the packs at or below a directory (nested folders included)."""
    from .pack.format import cached_content_hash, load

    if not directory.is_dir():
        raise InputError(f"{directory}: " + ("not a directory" if directory.exists() else "no such directory"))
    rows = []
    for root in _find_packs(directory):
        rel = "." if root == directory else str(root.relative_to(directory))
        try:
            p = load(root)
        except EnvgenError as e:
            rows.append({"path": str(root), "relative": rel, "error": str(e)})
            continue
        m = p.manifest
        rows.append({"path": str(root), "relative": rel, "name": m.name, "family": m.family,
                     "category": m.category, "tasks": len(p.tasks), "tools": len(m.tools), "version": m.version,
                     "modified": cached_content_hash(p.root, m) != m.version})
    if as_json:
        _emit_json(rows)
        return
    if not rows:
        out.print(f"no packs under {directory}", markup=False, highlight=False)
        return
    ok = [r for r in rows if "error" not in r]
    out.print(_table(f"{len(ok)} pack(s) under {directory}", ["path", "name", "family/category", "tasks", "tools",
                                                              "version"],
                     [[r["relative"], r["name"], f"{r['family']}/{r['category'] or '-'}", r["tasks"], r["tools"],
                       r["version"].removeprefix("sha256:")[:12] + (" (modified)" if r["modified"] else "")]
                      for r in ok]))
    for r in rows:
        if "error" in r:
            err.print(f"broken pack: {r['error']}", markup=False, highlight=False, soft_wrap=True)


@app.command()
def families(as_json: bool = JsonOpt):
    """List the families `envgen build` makes, their offline categories and their options."""
    from .build.family import families as all_families

    fams = all_families()
    if as_json:
        _emit_json([{"family": f.name, "description": f.description,
                     "categories": [{"category": c.name, "description": c.description} for c in f.categories()],
                     "options": [{**asdict(o), "flags": list(o.flags)} for o in f.describe_options()]}
                    for f in fams.values()])
        return
    out.print(_table("families (envgen build FAMILY --help for options)", ["family", "description"],
                     [[f.name, f.description] for f in fams.values()]))
    out.print(_table("offline categories (--category)", ["family", "category", "description"],
                     [[f.name, c.name, c.description] for f in fams.values() for c in f.categories()]))


@export_app.command("swebench")
def export_swebench_cmd(
    pack: Path = typer.Argument(..., help="A code pack, or a `envgen build code` output folder."),
    out_file: Optional[Path] = typer.Option(None, "--out", "-o", help="JSONL file to write (default: stdout)."),
    fmt: str = typer.Option("swebench", "--format", help="Row format: swebench (instance_id, patch, FAIL_TO_PASS, "
                            "...) or multi-swe-bench (org, repo, number, fix_patch, f2p_tests, ...)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document: the file written and the instance "
                                 "ids, or (without --out) the instances themselves."),
):
    """Write code packs back as SWE-bench or Multi-SWE-bench JSONL."""
    from .families.code import export_swebench

    rows = export_swebench(pack, out_file, format=fmt)
    if as_json:
        _emit_json({"out": str(out_file) if out_file else None, "instances": len(rows),
                    "instance_ids": [r["instance_id"] for r in rows], **({} if out_file else {"rows": rows})})
    elif out_file is None:
        for row in rows:
            sys.stdout.write(json.dumps(row, ensure_ascii=False) + "\n")
    else:
        err.print(f"wrote {len(rows)} instance(s) to {out_file}")


# ----------------------------------------------------------------------------- import


@import_app.command("tau2")
def import_tau2_cmd(
    path: Path = typer.Argument(..., help="Root of your tau2-bench checkout (the folder with src/tau2 and data/tau2)."),
    domain: str = typer.Option(..., "--domain", "-d", help="The domain to import: a folder of src/tau2/domains "
                               "(retail, airline)."),
    out: Path = typer.Option(..., "--out", "-o", help="Directory to write the pack to."),
    tasks: Optional[str] = typer.Option(None, "--tasks", help="Task file: a path, or a file name in the domain's data "
                                        "folder (default: tasks.json)."),
    split: Optional[str] = typer.Option(None, "--split", help="Keep only this split of split_<tasks file>.json "
                                        "(train, test, base); default: every task."),
    nl_assertions: str = typer.Option("report", "--nl-assertions", help="tau2's LLM-judged assertions: report (a "
                                      "judged rubric part that does not gate the reward, so the pack scores offline) "
                                      "or require (the rubric must pass: reward 0 until a judge grades it)."),
    as_json: bool = JsonOpt,
):
    """Turn a tau2-bench domain into a pack: tau2's own tools on its JSON database, its policy, its tasks."""
    from .importers.tau2 import import_tau2

    report = import_tau2(path, domain, out, tasks_file=tasks, split=split, nl_assertions=nl_assertions)
    summary = {"pack": str(report.pack.root), "domain": domain, "tasks": report.tasks, "skipped": report.skipped,
               "verifier_parts": report.kinds}
    if as_json:
        _emit_json(summary)
        return
    err.print(f"wrote {report.tasks} task(s) of tau2-bench {domain} to {report.pack.root}")
    for tid, why in report.skipped.items():
        err.print(f"skipped task {tid}: {why}")


# ----------------------------------------------------------------------------- corpus


@corpus_app.command("index")
def corpus_index(
    source: str = typer.Argument(..., help="JSONL(.gz), a folder of text/HTML, a save_to_disk folder, or hf:NAME."),
    out_file: Path = typer.Option(..., "--out", "-o", help="SQLite FTS5 index to write."),
    split: str = typer.Option("train", "--split"),
    id_field: str = typer.Option("id", "--id-field"),
    title_field: str = typer.Option("title", "--title-field"),
    text_field: str = typer.Option("text", "--text-field"),
    limit: Optional[int] = typer.Option(None, "--limit", min=1),
    as_json: bool = JsonOpt,
):
    """Index a corpus into a local SQLite FTS5 file (the offline search backend)."""
    from .retrieval.corpus import index_corpus

    st = index_corpus(source, out_file, split=split, id_field=id_field, title_field=title_field,
                      text_field=text_field, limit=limit)
    if as_json:
        _emit_json(asdict(st))
        return
    out.print(_table(str(st.path), ["docs", "languages", "domains", "MB", "seconds"],
                     [[st.docs, dict(st.languages), dict(st.domains), f"{st.bytes / 1e6:.1f}", f"{st.seconds:.1f}"]]))


@corpus_app.command("entities")
def corpus_entities(
    index_file: Path = typer.Argument(..., help="An index from `envgen corpus index`."),
    n: int = typer.Option(20, "-n", min=1, help="Entities to sample."),
    seed: int = typer.Option(0, "--seed"),
    min_score: float = typer.Option(0.0, "--min-score", help="Minimum long-tail score (0..1, rarer is higher)."),
    spans: bool = typer.Option(True, "--spans/--no-spans", help="Also mine named-entity spans, not only titles."),
    as_json: bool = JsonOpt,
):
    """Mine entities from an index, score how long-tail they are, and sample across domains and languages."""
    from .retrieval.corpus import mine_entities, sample_entities

    kinds = ("title", "span") if spans else ("title",)
    chosen = sample_entities(mine_entities(index_file, spans=spans), n, seed, min_score=min_score, kinds=kinds)
    if as_json:
        _emit_json([e.to_dict() for e in chosen])
        return
    out.print(_table(f"{len(chosen)} entities", ["name", "kind", "lang", "domain", "df", "in-links", "score"],
                     [[e.name, e.kind, e.lang, e.domain, e.df, e.inlinks, f"{e.score:.3f}"] for e in chosen]))


# ----------------------------------------------------------------------------- docker


@image_app.command("base")
def image_base(
    suite: str = typer.Option("bookworm", "--suite", help="Debian suite: buster (3.7, archived), bullseye (3.9), bookworm (3.11), trixie (3.13)."),
    toolchain: List[str] = typer.Option([], "--toolchain", help="Extra toolchain layer: node, go, jdk, gcc, php."),
    as_json: bool = JsonOpt,
):
    """Build (or reuse) an offline base image: debootstrap + docker import, tagged by recipe hash."""
    from .sandbox.images import build_base

    tag = build_base(suite, toolchain, log=lambda m: err.print(m, markup=False, highlight=False))
    if as_json:
        _emit_json({"tag": tag, "suite": suite, "toolchains": toolchain})
    else:
        out.print(tag, markup=False, highlight=False)


@image_app.command("build")
def image_build(pack: Path = typer.Argument(..., help="Pack directory."), allow_modified: bool = AllowModifiedOpt,
                as_json: bool = JsonOpt):
    """Build the pack's image (base -> family -> pack) and record its tag and digest in pack.json."""
    from .sandbox.images import build_pack_image
    from .pack.resolve import open_pack

    p = build_pack_image(open_pack(pack, allow_modified=allow_modified, log=_say),
                         log=lambda m: err.print(m, markup=False, highlight=False))
    if as_json:
        _emit_json({"pack": str(p.root), "base": p.manifest.image.base, "tag": p.manifest.image.tag,
                    "digest": p.manifest.image.digest})
    else:
        out.print(f"{p.manifest.image.tag} {p.manifest.image.digest}", markup=False, highlight=False)


@sandbox_app.command("gc")
def sandbox_gc(all_: bool = typer.Option(False, "--all", help="Also remove containers of live envgen processes."),
               as_json: bool = JsonOpt):
    """Remove leftover envgen sandbox containers (e.g. after a killed process)."""
    from .sandbox.docker import gc

    removed = gc(all=all_)
    if as_json:
        _emit_json({"removed": removed, "all": all_})
    else:
        out.print(f"removed {removed} container(s)")


# ----------------------------------------------------------------------------- hub


@app.command()
def publish(
    pack: Path = typer.Argument(..., help="Pack directory."),
    repo: str = typer.Option(..., "--repo", help="Hub dataset repository, ORG/NAME."),
    private: bool = typer.Option(False, "--private"),
    revision: Optional[str] = typer.Option(None, "--revision", help="Branch to publish to (default main)."),
    dry_run: Optional[Path] = typer.Option(None, "--dry-run", help="Write the exact upload folder here and stop."),
    license_: Optional[str] = typer.Option(None, "--license", help="Licence id for the card (default: unknown)."),
    allow_modified: bool = AllowModifiedOpt,
    as_json: bool = JsonOpt,
):
    """Publish a pack as a Hugging Face dataset (uses HF_TOKEN); an unchanged pack uploads nothing."""
    from .pack.hub import publish as run_publish
    from .pack.resolve import open_pack

    res = run_publish(open_pack(pack, allow_modified=allow_modified, log=_say), repo, private=private, revision=revision, dry_run=dry_run, license=license_)
    if as_json:
        _emit_json(res.to_dict())
    else:
        out.print(res.describe(), markup=False, highlight=False)


@app.command()
def pull(ref: str = typer.Argument(..., help="ORG/NAME[@REVISION]"), as_json: bool = JsonOpt):
    """Download a pack from the Hub into the Hugging Face cache, verify its hash, and print its path."""
    from .pack.hub import pull as run_pull

    p = run_pull(ref.removeprefix("hf://"))
    if as_json:
        _emit_json({"path": str(p.root), "name": p.manifest.name, "version": p.manifest.version, "tasks": len(p.tasks)})
    else:
        out.print(str(p.root))


def main() -> None:
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # a shell starts background jobs (``envgen build ... &``) with SIGINT ignored, and Python keeps it
        # so: ``kill -INT`` would then be lost and a build go on to its next candidate. Ctrl-C or kill -INT
        # stops every command the same way (KeyboardInterrupt: exit 130, the build's store left resumable)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with _json_stdout("--json" in sys.argv[1:]):
            app()
    except EnvgenError as e:
        if _state["debug"]:
            raise
        if e.llm_usage and e.llm_usage.get("session"):  # what the failed build spent, before the one error line
            err.print(_usage_table(e.llm_usage, "LLM usage before the build stopped"))
            if e.llm_usage.get("transcripts"):
                err.print(f"transcripts: {e.llm_usage['transcripts']}", markup=False, highlight=False, soft_wrap=True)
        # one line: the category ("error" for input, "service error", "sandbox error", ...) and the message
        err.print(f"{e.category}: {e}".replace("\n", " "), markup=False, highlight=False, soft_wrap=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        err.print("interrupted", markup=False)
        sys.exit(130)


if __name__ == "__main__":
    main()

"""Repository environments and task images: base -> repository environment -> task.

- base: ``envgen.sandbox.images.build_base(suite, toolchains)`` (the recipe's Debian suite and toolchains) and
  the code family layer over it (git, the runtime, the verifier kit);
- repository environment: the recipe's install steps as one ``RUN`` layer each, tagged
  ``envgen/repoenv:<language>-<key>-<family>`` where key hashes the steps (with suite and toolchains) and
  family names the family image it is built on. Every task
  whose repository version installs the same way shares this image, built once;
- task: the pack image (``envgen.sandbox.images.ensure_pack_image``) whose ``env/Dockerfile`` repeats exactly the
  environment's instructions over the same family image, so Docker's layer cache resolves them to the
  environment's layers, and adds only the task's files: the repository snapshot's git data and the tools.

A step's exit code is recorded whether it passed or failed; a failing step fails the build (no step is
ever masked with ``|| true``), and the candidates using that environment are rejected with the step,
its exit code and the build's last output.

The snapshot is a fresh git repository holding one commit whose tree is the base commit's tree,
copied object by object (no checkout, so export-ignore attributes, symlinks or files named
``Dockerfile`` cannot change it): the agent sees the code at the base commit and no history, so no
later commit can leak the fix.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ...sandbox import images
from ...errors import EnvgenError, InputError, EnvironmentFailed
from .lang import Recipe

ENV_REPO = "envgen/repoenv"
REPO_IN_BUILD = f"{images.WORK_DIR}/repo"
"""Where the task layer checks the repository out: the path the episode's working tree has."""
TASK_GIT_DIR = "/opt/envgen/task-src.git"
STEP_MARK, FAILED_MARK = "envgen task step: ", "envgen task step failed: "
REASON_MARK = "envgen task step reason: "
"""A line a task step prints before it fails: the rejection's reason (e.g. the artifacts Maven lacks)."""
"""The snapshot's git data during the task layer's build (removed with the checkout)."""
FAMILY = "code"
SNAPSHOT_IDENT = {"GIT_AUTHOR_NAME": "envgen", "GIT_AUTHOR_EMAIL": "envgen@localhost",
                  "GIT_COMMITTER_NAME": "envgen", "GIT_COMMITTER_EMAIL": "envgen@localhost",
                  "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000"}
"""Fixed identity and dates: the same tree always gives the same snapshot commit."""


@dataclass
class StepResult:
    name: str
    run: str
    rc: int | None
    """Exit code; None for a step the build never reached."""
    seconds: float | None = None


@dataclass
class Environment:
    """A built (or reused) repository environment image."""

    key: str
    tag: str
    image_id: str
    base: str
    family: str
    steps: list[StepResult]
    reused: bool
    seconds: float
    recipe: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def env_instructions(recipe: Recipe) -> list[str]:
    """The Dockerfile instructions of the environment layer (the same text in its image and every task's)."""
    return ["USER root", *(f"RUN {s.run}" for s in recipe.steps)]


def task_instructions(recipe: Recipe) -> list[str]:
    """The task layer, one ``RUN``: the snapshot checked out at /work/repo (the path the episode's tree will
    have, with a ``.git`` file as there), the recipe's task steps run there in order, then the checkout
    removed (the episode materialises its own; what the steps must keep of the tree they copy out, see
    ``envgen_verifiers.install``). One layer, so the checkout never weighs in the image; a failing step
    ends the build with a last line naming it and its exit code (each step runs in a subshell, so an
    ``exit`` in it cannot skip that line); a line of the step starting with ``REASON_MARK`` says why."""
    if not recipe.task_steps:
        return []
    src = TASK_GIT_DIR
    parts = [f"mkdir -p {REPO_IN_BUILD}", f"printf 'gitdir: {src}\\n' > {REPO_IN_BUILD}/.git",
             f"git -C {REPO_IN_BUILD} reset -q --hard"]
    for s in recipe.task_steps:
        parts.append(f"echo {shlex.quote(STEP_MARK + s.name)} && cd {REPO_IN_BUILD} && ( {s.run} ) || "
                     f"{{ rc=$?; echo {shlex.quote(FAILED_MARK + s.name)} exit $rc; exit $rc; }}")
    parts.append(f"cd / && rm -rf {REPO_IN_BUILD} {src}")
    return ["USER root", f"COPY repo.git {src}", "RUN " + " && ".join(f"( {p} )" if " || " in p else p
                                                                       for p in parts)]


def pack_dockerfile(recipe: Recipe) -> str:
    """A task pack's env/Dockerfile: the environment's instructions over the family image envgen passes in,
    then the task layer (``task_instructions``)."""
    header = (f"# repository environment {recipe.key} ({recipe.language}, {recipe.image_base})\n"
              "ARG ENVGEN_BASE\nFROM ${ENVGEN_BASE}\n")
    return header + "\n".join(env_instructions(recipe) + task_instructions(recipe)) + "\n"


def build_task_image(pack, recipe: Recipe, *, client=None, log=images.stderr_log, registry: str | None = None):
    """Build the task's pack image (``images.build_pack_image``, which pulls it from and pushes it to
    ``registry`` when one is given); a failing task step (the project's install or its check) raises
    EnvironmentFailed naming the step, its exit code and the build's last output."""
    try:
        return images.build_pack_image(pack, client=client, log=log, registry=registry)
    except EnvgenError as e:
        tail = getattr(e, "tail", "") or str(e)
        m = re.findall(re.escape(FAILED_MARK) + r"(\S+) exit (\d+)", tail)
        names = [s.name for s in recipe.task_steps]
        if not m or m[-1][0] not in names:
            raise
        name, rc = m[-1][0], int(m[-1][1])
        failed = names.index(name)
        steps = [StepResult(s.name, s.run, 0 if i < failed else rc if i == failed else None)
                 for i, s in enumerate(recipe.task_steps)]
        said = re.findall(re.escape(REASON_MARK) + r"([^|\n]+)", tail)
        what = f"task image: step {name!r} exited with {rc}"
        raise EnvironmentFailed(f"{said[-1].strip()} ({what})" if said else what, steps, tail[-3000:]) from None


def env_tag(recipe: Recipe, family: str) -> str:
    """The environment image's tag: the recipe's key and the family image it sits on (whose tag hashes the
    runtime and verifier kit), so an envgen upgrade never reuses an environment built on an older layer."""
    return f"{ENV_REPO}:{recipe.language}-{recipe.key}-{family.rsplit('-', 1)[-1][:8]}"


def family_for(recipe: Recipe, *, client=None, log=images.stderr_log) -> tuple[str, str]:
    """(base tag, family tag) for the recipe's suite and toolchains, built when missing."""
    base = images.build_base(recipe.suite, recipe.toolchains, client=client, log=log)
    return base, images.family_image(FAMILY, base, client=client, log=log)


def build_environment(recipe: Recipe, *, client=None, log=images.stderr_log) -> Environment:
    """Build (or reuse) the repository environment image of ``recipe``; record each step's exit code."""
    client = images.docker_client(client)
    t0 = time.perf_counter()
    base, fam = family_for(recipe, client=client, log=log)
    tag = env_tag(recipe, fam)
    if images.image_exists(client, tag):
        return Environment(recipe.key, tag, client.images.get(tag).id, base, fam,
                           [StepResult(s.name, s.run, 0) for s in recipe.steps], True,
                           time.perf_counter() - t0, recipe.to_dict())
    with images.build_lock(tag):
        if images.image_exists(client, tag):
            return build_environment(recipe, client=client, log=log)
        steps = [StepResult(s.name, s.run, None) for s in recipe.steps]
        run_index = {f"RUN {s.run}": i for i, s in enumerate(recipe.steps)}
        current: list = [None, 0.0]  # [index of the running step, its start time]

        def track(line: str) -> None:
            log(line)
            m = re.match(r"^\s*Step \d+/\d+ : (.*)$", line)
            if not m:
                return
            now = time.perf_counter()
            if current[0] is not None:
                steps[current[0]].rc, steps[current[0]].seconds = 0, round(now - current[1], 3)
                current[0] = None
            idx = run_index.get(m.group(1).strip())
            if idx is None:  # docker shortens long instructions in its log: match on the start
                idx = next((i for k, i in run_index.items() if k.startswith(m.group(1).strip().rstrip("."))), None)
            if idx is not None:
                current[0], current[1] = idx, now

        dockerfile = f"FROM {fam}\n" + "\n".join(env_instructions(recipe)) + "\n"
        ctx = images.BuildContext()
        ctx.add_bytes("Dockerfile", dockerfile.encode())
        labels = {"envgen.env": recipe.key, "envgen.language": recipe.language,
                  "envgen.recipe": json.dumps(recipe.to_dict(), sort_keys=True)[:60_000]}
        log(f"building repository environment {tag} ({len(recipe.steps)} steps)")
        try:
            images.docker_build(client, ctx.finish()[0], tag, labels=labels, log=track)
        except EnvgenError as e:
            msg = str(e)
            m = re.search(r"non-zero code: (\d+)", msg)
            if current[0] is not None:
                steps[current[0]].rc = int(m.group(1)) if m else -1
                steps[current[0]].seconds = round(time.perf_counter() - current[1], 3)
            failed = next((s for s in steps if s.rc not in (0, None)), None)
            what = f"step {failed.name!r} exited with {failed.rc}" if failed else "the build failed"
            raise EnvironmentFailed(f"repository environment {recipe.key}: {what}", steps, msg[-1500:]) from None
        if current[0] is not None:
            steps[current[0]].rc, steps[current[0]].seconds = 0, round(time.perf_counter() - current[1], 3)
        for s in steps:  # a cached layer prints no timing but did run successfully once
            if s.rc is None:
                s.rc = 0
    return Environment(recipe.key, tag, client.images.get(tag).id, base, fam, steps, False,
                       time.perf_counter() - t0, recipe.to_dict())


# ---------------------------------------------------------------- repository snapshots


def _git(repo_or_dir: Path, *args: str, env: dict | None = None, input: bytes | None = None,
         git_dir: bool = False) -> bytes:
    where = ["--git-dir", str(repo_or_dir)] if git_dir else ["-C", str(repo_or_dir)]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    full_env.update(env or {})
    out = subprocess.run(["git", *where, *args], input=input, capture_output=True, env=full_env)
    if out.returncode != 0:
        raise InputError(f"git {' '.join(args[:2])} in {repo_or_dir} failed: "
                          f"{out.stderr.decode(errors='replace').strip()[-300:]}")
    return out.stdout


def make_snapshot(repo: Path, commit: str, dest: Path, *, message: str = "") -> str:
    """Write a one-commit git directory at ``dest`` whose tree is ``commit``'s tree; return the new commit."""
    tree = _git(repo, "rev-parse", "--verify", f"{commit}^{{tree}}").decode().strip()
    listed = _git(repo, "rev-list", "--objects", tree).decode().splitlines()
    ids = "\n".join(line.split(" ", 1)[0] for line in listed if line.strip()) + "\n"
    pack = _git(repo, "pack-objects", "--stdout", "-q", "--threads=1", input=ids.encode())
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "objects" / "pack").mkdir(parents=True)
    (dest / "refs" / "heads").mkdir(parents=True)
    (dest / "HEAD").write_text("ref: refs/heads/main\n")
    (dest / "config").write_text("[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"
                                 "\tlogallrefupdates = false\n")
    _git(dest, "index-pack", "--stdin", input=pack, git_dir=True)
    sha = _git(dest, "commit-tree", tree, "-m", message or f"base {commit}", env=SNAPSHOT_IDENT,
               git_dir=True).decode().strip()
    (dest / "refs" / "heads" / "main").write_text(sha + "\n")
    return sha


def layer_sharing(client, task_ref: str, env_ref: str) -> dict:
    """How much of a task image is its own: the environment's layers must be a prefix of the task's
    (they are when the cache resolved the shared instructions); unique bytes are what the task adds."""
    task, env = client.images.get(task_ref), client.images.get(env_ref)
    tl, el = task.attrs["RootFS"]["Layers"], env.attrs["RootFS"]["Layers"]
    shared = tl[:len(el)] == el
    return {"shared_layers": len(el) if shared else 0, "task_layers": len(tl), "env_bytes": env.attrs["Size"],
            "task_bytes": task.attrs["Size"], "unique_bytes": task.attrs["Size"] - (env.attrs["Size"] if shared else 0),
            "shares_environment": shared}

"""A code pack as it was before twin checks, for showing that a forgery is real: it buys the twinless copy."""

from __future__ import annotations

import shutil
from pathlib import Path

from envgen.pack import save


def without_twins(pack, dest: Path):
    """A copy of the pack (saved at ``dest``) whose task has no twin checks: ``args["twins"]`` and
    ``hidden/twins.json`` removed, everything else the same."""
    task = pack.tasks[0]
    args = dict(task.verifier.args)
    assert args.pop("twins")["files"] == "twins.json", "the pack has no twin checks to remove"
    hidden = dest.parent / f"{dest.name}-hidden"
    shutil.copytree(pack.hidden_dir, hidden)
    (hidden / "twins.json").unlink()
    new = task.model_copy(update={"verifier": task.verifier.model_copy(update={"args": args})})
    return save(type(pack)(pack.manifest, [new], pack.root), dest, env_from=pack.root / "env", hidden_from=hidden)


def gate_forgery(pack) -> str:
    """The red-team gate's forgery probe for the pack's task: its runner's payload planted as the gate
    plants it (``envgen.build.gate.forgery_patch``), from the task's base in the pack's own snapshot."""
    import hashlib
    import subprocess

    from envgen.build.gate import forgery_patch

    task = pack.tasks[0]
    args = task.verifier.args

    def read(path: str) -> str | None:
        out = subprocess.run(["git", "--git-dir", str(pack.env_dir / "repo.git"), "show", f"{args['base']}:{path}"],
                             capture_output=True)
        return out.stdout.decode("utf-8", "surrogateescape") if out.returncode == 0 else None

    patch = forgery_patch(read, args["framework"], task.reference.patch or "",
                          hashlib.sha256(task.id.encode()).hexdigest()[:12])
    assert patch, "the gate's forgery probe does not apply to this task"
    return patch


def episode(pack, calls: list[tuple] = (), *, submit: dict | None = None, sandbox: str = "local") -> tuple[float, dict]:
    """(reward, verifier details) of one episode of the pack's task through ``gymnasium.make``: the tool
    calls, then ``submit`` (the working tree's diff, or the given arguments), then a final answer."""
    import gymnasium

    import envgen  # noqa: F401  (registers envgen/Pack-v0)
    from envgen.episodes.actions import render_action

    env = gymnasium.make("envgen/Pack-v0", pack=str(pack.root), sandbox=sandbox)
    try:
        env.reset(options={"task_id": pack.tasks[0].id})
        for name, args in [*calls, ("submit", submit or {})]:
            obs, _, terminated, truncated, _ = env.step(render_action("", [(name, args)]))
            assert not (terminated or truncated), obs
        assert "submitted a patch" in obs, obs
        _, reward, terminated, _, info = env.step("I fixed the issue.")
        assert terminated
        return reward, info["reward_details"]
    finally:
        env.close()

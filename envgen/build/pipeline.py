"""The plumbing every LLM-agent build pipeline shares, so each family writes only its stages.

``LLMPipeline`` holds the model pool, the state store (``envgen.store``), the role specs
(``envgen.llm.roles``), one ``LLMClient`` per config, the run's usage and models, and the transcripts
directory. It builds agents with their transcript file and request salt (the salt makes a rerun's
requests identical, so paid calls replay from the store), records finished agents, and runs named
stages resumably: a stage done in the store is skipped, a failed one is marked and the run stops with
an error telling the user to rerun the same command (or, where the model caused the failure, to rerun with
``--retry-failed``: the failed stages' cached calls are then forgotten and asked afresh). ``run()`` wraps a
family's ``execute()``: however it ends (an error, a bug, Ctrl-C), the run is never left "running" in the store,
and an error carries the session's LLM usage (``EnvgenError.llm_usage``) for the CLI's usage table.

Families run their independent stages (a search entity, an interpreter problem) through ``run_stages``: on
worker threads here, or, after ``on_ray``, as Ray tasks (``envgen.build.distributed``): each task rebuilds
the pipeline from its picklable recipe (the family's class and constructor arguments: configs, the store
URL, the run's inputs), runs the stage under a lease in the shared store and writes what it produced there,
so the driver assembles the pack from the store exactly as a local build does. The request salts depend on
the run and the stage only, so a stage gives the same requests, and replays the same paid calls, wherever
it runs. The client cache and the usage total are locked (worker threads share them).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from ..errors import EnvgenError, LLMError
from ..llm.agent import Agent, Toolset
from ..llm.client import LLMClient, LLMConfig, LLMPool, TranscriptFile, Usage
from ..llm.roles import AgentSpec, load_spec
from ..passcheck.executors import connect_ray
from ..store import Store
from .distributed import LEASE_S, Units, run_unit

Progress = Callable[[int], Any]
log = logging.getLogger("envgen.build")


class LLMPipeline:
    """Base of a family's LLM build: agents, their clients and usage, and resumable stages in a store."""

    def __init__(self, *, llm: LLMConfig | list[LLMConfig] | LLMPool, store_url: str | None, run_id: str,
                 roles: tuple[str, ...], agents_dir: Path | None, work: Path, progress: Progress | None,
                 salt: str | None = None, retry_failed: bool = False):
        """Open the store and load the roles' specs (errors in either surface before any model call).

        Args:
            llm: the model configs agents are picked from (per role, see ``LLMPool.pick``)
            store_url: the state store (None: ``ENVGEN_STORE``, else the default SQLite file)
            run_id: the store's key of this run: the same inputs must give the same id, that is how a
                rerun finds its stages and paid calls
            roles: the role names whose specs this pipeline uses
            agents_dir: a directory overriding the bundled role files (None: the bundled ones)
            work: this run's scratch directory (created); transcripts go under ``work/transcripts``
            progress: called with 1 per finished or skipped stage
            salt: prefix of every request's salt (default ``run_id``); a family whose run id holds
                settings that must not change the requests (and so the replayed answers) passes its own
            retry_failed: forget the cached calls of stages an earlier run marked failed before running them
                again (``--retry-failed``): a failure the model caused (it never submitted, it looped) would
                otherwise replay identically, while a plain rerun keeps replaying (right after an outage)
        """
        self.pool = LLMPool.of(llm)
        self.store = Store(store_url)
        self.run_id = run_id
        self.salt = run_id if salt is None else salt
        self.specs: dict[str, AgentSpec] = {r: load_spec(r, agents_dir) for r in roles}
        self.progress = progress or (lambda n=1: None)
        self.work = Path(work)
        self.work.mkdir(parents=True, exist_ok=True)
        self.transcripts = self.work / "transcripts"
        self.usage = Usage()
        """This process's model usage (paid and replayed calls), summed over finished agents."""
        self.models: set[str] = set()
        """Every model an agent was given, for the pack's provenance."""
        self._clients: dict[str, LLMClient] = {}
        self._clients_lock = threading.Lock()
        self._usage_lock = threading.Lock()
        self._ray: tuple[Callable[..., LLMPipeline], dict[str, Any], str | None, float] | None = None
        self.retry_failed = retry_failed
        self.forgotten = 0
        """Cached calls this process forgot for ``retry_failed``."""

    # -- the run

    def run(self) -> Any:
        """The family's ``execute()`` (its whole build), recording how it ended whatever happens: the run is
        marked failed in the store on any error, bug or Ctrl-C (a finished run marks itself done), and an
        EnvgenError gets the session's LLM usage as ``llm_usage`` so a failed build still shows what it spent."""
        try:
            return self.execute()
        except BaseException as e:
            try:
                self.store.finish_run(self.run_id, "failed", {"error": self.scrub(f"{type(e).__name__}: {e}")[:2000],
                                                              "llm": self.usage.to_dict()})
            except Exception:  # the store itself is what failed: the original error is the one to report
                pass
            if isinstance(e, EnvgenError) and e.llm_usage is None:
                e.llm_usage = {"session": self.usage.to_dict(), "transcripts": str(self.transcripts)}
            raise

    def execute(self) -> Any:
        """The family's build: open the run, run the stages, assemble the pack, mark the run done."""
        raise NotImplementedError

    def on_ray(self, recipe: Callable[..., LLMPipeline], kwargs: dict[str, Any], *, address: str | None = None,
               lease_s: float = LEASE_S) -> None:
        """Run ``run_stages``' stages as Ray tasks on the cluster at ``address`` (None: ``RAY_ADDRESS``, else a
        local one). A task rebuilds this pipeline as ``recipe(**kwargs)`` (picklable: module-level, with
        configs, the store URL and the run's inputs; its ``progress`` is None: the driver counts stages);
        the store must be one every node reaches (a PostgreSQL URL across machines). ``lease_s``: how long a
        dead worker's stage stays claimed before another takes it over."""
        self._ray = (recipe, {**kwargs, "progress": None}, address, lease_s)

    @property
    def on_cluster(self) -> bool:
        """Whether ``run_stages`` runs stages as Ray tasks (``on_ray`` was called)."""
        return self._ray is not None

    def scrub(self, text: str) -> str:
        """Error text as stored and shown; families that run generated code hide per-run paths here."""
        return text

    # -- agents

    def client(self, cfg: LLMConfig) -> LLMClient:
        """The one client of ``cfg`` (locked: two threads must not each build one)."""
        with self._clients_lock:
            if cfg.name not in self._clients:
                self._clients[cfg.name] = LLMClient(cfg, cache=self.store, run_id=self.run_id)
            self.models.add(cfg.model)
            return self._clients[cfg.name]

    def agent(self, role: str, stage: str, ordinal: int, tools: Toolset, suffix: str = "", *,
              preferred: str | None = None, max_turns: int | None = None, note: str = "") -> Agent:
        """An agent for ``role`` at ``stage``; ``suffix`` tells apart several agents of a role in one stage.

        Its transcript is ``transcripts/STAGE--ROLE{suffix}.jsonl`` and its salt ``SALT|STAGE|ROLE{suffix}``,
        both stable across reruns. ``ordinal`` spreads roles over the pool's configs; ``preferred`` (a config
        name), ``max_turns`` and ``note`` (appended to the system prompt) override the role's spec.
        """
        spec = self.specs[role]
        cfg = self.pool.pick(role, preferred or spec.model, ordinal)
        path = self.transcripts / f"{stage.replace('/', '_')}--{role}{suffix}.jsonl"
        system = spec.instructions + (f"\n\n{note}" if note else "")
        return Agent(self.client(cfg), tools, system=system, name=f"{stage}/{role}{suffix}",
                     max_turns=max_turns or spec.budgets.max_turns, max_tokens=spec.budgets.max_tokens,
                     max_calls_per_message=spec.budgets.max_calls_per_message,
                     salt=f"{self.salt}|{stage}|{role}{suffix}", transcript=TranscriptFile(path))

    def add_usage(self, usage: Usage) -> None:
        """Add to the run's usage (locked: ``Usage.add`` is a read-modify-write of every field)."""
        with self._usage_lock:
            self.usage.add(usage)

    def finish_agent(self, agent: Agent, stage: str, role: str) -> None:
        """Count the agent's usage, record its session in the store and close its transcript."""
        self.add_usage(agent.usage)
        self.store.add_agent_run(self.run_id, stage=stage, role=role, **agent.record())
        agent.close()

    # -- stages

    @staticmethod
    def until_accepted(agent: Agent, msg: str, box: Any, tool: str, fields: str) -> Any:
        """Send ``msg``, then nudge the agent while it answers without an accepted submission, at most
        ``box.budget`` times (``box``: accepted, submissions, budget, last_reason). The last response."""
        nudges = 0
        while True:
            res = agent.send(msg)
            if box.accepted is not None or res.outcome != "answered" or box.submissions >= box.budget \
                    or nudges >= box.budget:
                return res
            nudges += 1
            why = f" (the last submission was rejected for: {box.last_reason})" if box.submissions else ""
            msg = f"You have not handed in an accepted {tool.split('_', 1)[1]} yet. Call {tool} with {fields}{why}."

    def run_stage(self, key: str, body: Callable[..., Any], *args: Any, error: type[EnvgenError], stopped: str,
                  kept: str) -> bool:
        """Run ``body(*args)`` as stage ``key``, unless the store has it done; whether it ran.

        ``body`` marks the stage done itself (``Store.finish_stage``, with what it produced, atomically).
        An LLMError or EnvgenError marks the stage and the run failed and raises ``error`` with the
        message ``"{stopped}: {why}. Rerun the same command to resume; {kept} are kept in {store}"``.
        Other exceptions are bugs and propagate as they are.
        """
        st = self.store.stage(self.run_id, key)
        if st is not None and st.status == "done":
            return False
        if st is not None and st.status == "failed" and self.retry_failed:
            n = self.store.forget_llm_calls(self.run_id, f"{key}/")
            self.forgotten += n
            if n:
                log.warning("stage %s failed before (%s): its %d cached LLM call(s) are asked afresh (--retry-failed)",
                            key, (st.error or "")[:200], n)
        self.store.start_stage(self.run_id, key)
        self.store.clear_results(self.run_id, key)  # an interrupted attempt's checks are redone
        try:
            body(*args)
        except (LLMError, EnvgenError) as e:
            msg = self.scrub(str(e))
            self.store.fail_stage(self.run_id, key, msg)
            self.store.add_error(self.run_id, key, type(e).__name__, msg)
            raise self.stop(error, f"{stopped}: {self.shown(msg)}", kept) from None
        except BaseException as e:  # a bug or Ctrl-C: propagates as it is, the stage never left "running"
            self.store.fail_stage(self.run_id, key, "interrupted" if isinstance(e, KeyboardInterrupt)
                                  else self.scrub(f"{type(e).__name__}: {e}"))
            raise
        return True

    def shown(self, text: str) -> str:
        """Scrubbed text as the user reads it: the transcripts' placeholder turned back into their real path."""
        hidden = self.scrub(str(self.transcripts))
        return text.replace(hidden, str(self.transcripts)) if hidden != str(self.transcripts) else text

    def run_stages(self, todo: Sequence[tuple[str, tuple]], body: Callable[..., Any], *, workers: int,
                   error: type[EnvgenError], stopped: str, kept: str, thread_name: str) -> None:
        """``run_stage(key, body, *args)`` for every ``(key, args)`` of ``todo`` on ``workers`` threads (as Ray
        tasks after ``on_ray``: ``body`` must then be a method of this pipeline and ``args`` picklable), calling
        ``progress(1)`` after each; the first failure cancels what has not started and is raised (as ``error``
        when it is not one already, the run marked failed)."""
        if self._ray is not None and todo:
            return self._run_stages_on_ray(todo, body, workers=workers, error=error, stopped=stopped, kept=kept)

        def one(key: str, args: tuple) -> None:
            self.run_stage(key, body, *args, error=error, stopped=stopped, kept=kept)
            self.progress(1)

        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(todo))), thread_name_prefix=thread_name) as ex:
            futures = [ex.submit(one, key, args) for key, args in todo]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            failed = next((f for f in done if f.exception() is not None), None)
            if failed is not None:
                for f in futures:
                    f.cancel()
                ex.shutdown(wait=True)
                e = failed.exception()
                if not isinstance(e, error):  # not stopped by run_stage (which marked the run)
                    e = self.stop(error, f"{stopped}: {e}", kept)
                raise e from None

    def tally(self) -> dict[str, int]:
        """Counters of this session a family reports besides the usage (e.g. search-cache hits): a Ray task
        returns its own, and the driver adds them up with ``add_tally``, so the report counts them all."""
        return {}

    def add_tally(self, counts: dict[str, int]) -> None:
        """Add a Ray task's ``tally`` to this session's counters (nothing to add by default)."""

    def _run_stages_on_ray(self, todo: Sequence[tuple[str, tuple]], body: Callable[..., Any], *, workers: int,
                           error: type[EnvgenError], stopped: str, kept: str) -> None:
        recipe, kwargs, address, lease_s = self._ray
        method = getattr(body, "__name__", "")
        if getattr(type(self), method, None) is None or getattr(body, "__self__", None) is not self:
            raise TypeError(f"run_stages on Ray runs methods of the pipeline, not {body!r}")
        units = Units(connect_ray(address, workers), run_stage_unit)
        for key, args in todo:
            units.submit(key, recipe, kwargs, key, method, args, error, stopped, kept, lease_s)
        try:
            for _key, result in units.completed():
                if "error" in result:  # the unit marked its stage and the run failed, as run_stage does here
                    # the others are interrupted, not their workers killed: their leases are released, so the
                    # rerun the error asks for takes their stages at once instead of waiting for the leases to end
                    units.cancel(force=False)
                    raise error(result["error"])
                used = result.get("usage", {})
                self.add_usage(Usage(**{k: v for k, v in used.items() if k in Usage.__dataclass_fields__}))
                self.models.update(result.get("models", ()))
                self.add_tally(result.get("tally", {}))
                self.progress(1)
        except error:
            raise
        except Exception as e:  # a bug in a unit (Ray hands it back wrapped): the run is marked, as on threads
            cause = getattr(e, "cause", None) or e
            raise self.stop(error, f"{stopped}: {type(cause).__name__}: {cause}", kept) from e
        finally:
            units.cancel()

    def stop(self, error: type[EnvgenError], what: str, kept: str) -> EnvgenError:
        """Mark the run failed and return the ``error`` to raise, saying how to resume."""
        self.store.finish_run(self.run_id, "failed", {"error": what[:2000], "llm": self.usage.to_dict()})
        return error(f"{what}. Rerun the same command to resume; {kept} are kept in {self.store.url} (add "
                     f"--retry-failed to ask the model afresh where it caused the failure)")


def run_stage_unit(recipe: Callable[..., LLMPipeline], kwargs: dict[str, Any], key: str, method: str, args: tuple,
                   error: type[EnvgenError], stopped: str, kept: str, lease_s: float = LEASE_S) -> dict[str, Any]:
    """One stage of an LLM pipeline as a Ray task: the pipeline rebuilt from its recipe, ``run_stage(key,
    pipeline.METHOD, *args)`` under a lease in the store (``run_unit``: a stage another worker holds is waited
    for, a dead worker's taken over when its lease runs out, a done one not run again). Returns this
    session's usage and models (a stage found done: none), or ``{"error": message}`` when the stage failed
    (the stage and the run are marked failed in the store; the driver raises it)."""
    pipe = recipe(**kwargs)

    def unit(lease: Any) -> dict[str, Any]:
        pipe.run_stage(key, getattr(pipe, method), *args, error=error, stopped=stopped, kept=kept)
        return {"usage": pipe.usage.to_dict(), "models": sorted(pipe.models), "tally": pipe.tally()}

    try:
        return run_unit(pipe.store, pipe.run_id, key, unit, lease_s=lease_s)
    except error as e:
        return {"error": str(e)}

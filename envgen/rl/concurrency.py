"""Run the tool calls of all rollouts of a tool-calling turn concurrently under TRL's sequential loop.

TRL 1.16's ``GRPOTrainer._tool_call_loop`` walks the rollouts of a turn one after another and calls each
one's tools inline (async tools are gathered only within one rollout), so eight rollouts that each
wait 0.5 s on a sandbox take 4 s. Every rollout's calls for the turn are already parsed into
``completions`` before the first call is made, though. ``ToolPrefetch`` replaces the per-rollout tool
dicts with wrappers: the first call of a turn plans the calls of every rollout (with TRL's own rules for
which calls it will make), submits one job per rollout (its calls in order, on its environment's
executor, which bounds parallel sandboxes), and each wrapper then returns its call's result from the
job. TRL still sees ordinary synchronous tools, so its loop, metrics and error handling are unchanged.
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class _Planned:
    name: str
    args: dict[str, Any]
    future: Future = field(default_factory=Future)


class ToolPrefetch:
    """Concurrent execution of the environment tool calls TRL is about to make, one job per rollout.

    ``environments[i]`` and ``tool_dicts[i]`` are rollout i's environment and TRL's synchronous tool dict;
    ``completions`` is TRL's live list of per-rollout messages (read, never modified). Only bound methods
    of the rollout's own environment are prefetched; other tools pass through untouched.
    """

    def __init__(self, environments: list[Any], completions: list[list[dict]], tool_dicts: list[dict[str, Callable]],
                 default_executor: Executor):
        self.environments = environments
        self.completions = completions
        self.originals = tool_dicts
        self.default_executor = default_executor
        self.queues: dict[int, deque[_Planned]] = {}
        self._planned: dict[int, dict] = {}  # id(message) -> message (kept alive so ids are not reused)
        self.jobs = 0
        self.tool_dicts = [{name: self._wrap(i, name, fn) if self._is_env_method(i, fn) else fn
                            for name, fn in d.items()} for i, d in enumerate(tool_dicts)]

    def _is_env_method(self, i: int, fn: Callable) -> bool:
        return i < len(self.environments) and getattr(fn, "__self__", None) is self.environments[i]

    def _wrap(self, i: int, name: str, fn: Callable) -> Callable:
        def tool(**kwargs):
            return self._result(i, name, kwargs, fn)

        tool.__name__ = name
        return tool

    def _result(self, i: int, name: str, kwargs: dict[str, Any], fn: Callable) -> Any:
        queue = self.queues.get(i)
        if not queue:
            self._plan()
            queue = self.queues.get(i)
        for planned in queue or ():
            if planned.name == name and planned.args == kwargs:
                queue.remove(planned)
                return planned.future.result()
        return fn(**kwargs)  # a call TRL made that the plan did not foresee: run it in place

    def _plan(self) -> None:
        """Plan and submit the pending calls of every rollout whose last message is an unplanned tool call."""
        for j, messages in enumerate(self.completions):
            if not messages or j >= len(self.originals):
                continue
            last = messages[-1]
            if last.get("role") != "assistant" or not last.get("tool_calls") or id(last) in self._planned:
                continue
            self._planned[id(last)] = last
            calls = [c for c in (self._planned_call(j, tc) for tc in last["tool_calls"]) if c is not None]
            if not calls:
                continue
            self.queues.setdefault(j, deque()).extend(calls)
            env = self.environments[j]
            executor = getattr(type(env), "_executor", None) or self.default_executor
            executor.submit(self._run, j, calls)
            self.jobs += 1

    def _planned_call(self, j: int, tool_call: dict) -> _Planned | None:
        """The call TRL will make for ``tool_call`` (mirrors its checks), or None when it makes none."""
        if not isinstance(tool_call, Mapping) or tool_call.get("type") != "function":
            return None
        function = tool_call.get("function") or {}
        name, args = function.get("name"), function.get("arguments")
        fn = self.originals[j].get(name) if isinstance(name, str) else None
        if fn is None or not self._is_env_method(j, fn) or not isinstance(args, Mapping):
            return None
        try:
            inspect.signature(fn).bind(**args)
        except TypeError:
            return None  # TRL's call raises before reaching the tool; it reports that itself
        return _Planned(name, dict(args))

    def _run(self, j: int, calls: list[_Planned]) -> None:
        fns = self.originals[j]
        for call in calls:
            try:
                call.future.set_result(fns[call.name](**call.args))
            except BaseException as e:  # noqa: BLE001 - handed to TRL, which reports tool errors itself
                call.future.set_exception(e)


def default_executor(max_workers: int = 8) -> ThreadPoolExecutor:
    """The executor for environments that bring none (non-envgen ``environment_factory`` classes)."""
    return ThreadPoolExecutor(max_workers, thread_name_prefix="envgen-tools")

"""PackEnv: a pack as a Gymnasium environment, registered as ``envgen/Pack-v0``.

One episode is one task. The observation is text (the user prompt at reset, or in a user task of a pack
whose agent speaks first, ``Manifest.agent_first``, the user's opening after the pack's greeting, both in
``info["messages"]``; then the results of the tool calls the last action made); the action is the assistant's message (OpenAI JSON or raw model
text, see ``envgen.episodes.actions``). A message without tool calls is the final answer: the verifier runs
once and its reward ends the episode (``terminated``); in a task with a simulated user (``Task.user``) it goes
to the user instead, whose reply is the observation, until the user ends the conversation (then the
verifier runs, the agent's last message being the answer). Running out of turns (``max_turns``) or of
wall-clock time (the pack's ``episode_timeout_s``) ends it with ``truncated`` and reward 0 *without*
running the verifier: the agent never answered, and a verifier run would cost time and give a signal
for a trajectory the agent did not choose to end.

Bad actions never raise: they come back as an error observation and bump a counter in ``info``, so
an RL loop cannot be crashed by what a model writes. A message that does not parse is recorded in
``info["messages"]`` as the assistant's raw text followed by a ``user`` message holding the error (it
has no tool call id a ``tool`` message could answer); a call the sandbox refuses (unknown tool, wrong
arguments) or that fails (exception, timeout, killed runtime) is answered by its ``tool`` message.
The observation after the final answer is "" (nothing is left to observe).

Strings do not fit ``gymnasium.spaces.Text`` (it needs a finite charset), so TextSpace below accepts
any ``str`` up to a length bound; it registers itself with Gymnasium's vector utilities so batches are
tuples of ``str`` in SyncVectorEnv and AsyncVectorEnv (shared memory included).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Mapping
from collections.abc import Sequence as SequenceABC
from typing import Any, SupportsFloat

import gymnasium
import numpy as np
from gymnasium import error as gym_error
from gymnasium.spaces import Space
from gymnasium.vector.utils import (
    create_empty_array,
    create_shared_memory,
    read_from_shared_memory,
    write_to_shared_memory,
)

from .actions import PARSE_FORMATS, canonical_format, parse_action
from .episode import Episode, opening
from .prompt import DEFAULT_SYSTEM_PROMPT, agent_prompt, episode_rules
from .users import parse_user_model, make_user
from ..errors import ActionError, InputError
from ..llm.judge import JudgedSandbox, make_judge
from ..pack.format import agent_speaks_first
from ..pack.resolve import open_pack
from ..sandbox import check_backend, open_sandbox

ENV_ID = "envgen/Pack-v0"
DEFAULT_MAX_TEXT = 1 << 18
"""Observation bound in characters (256 Ki): far above one tool result (the pack's output_limit,
16 Ki by default) and small enough for a per-env shared-memory slot in AsyncVectorEnv (1 MiB)."""
MIN_MAX_TEXT = 256

INVALID_CODES = frozenset({"unknown_tool", "bad_arguments"})
"""Tool-call failures that are the action's fault (counted as invalid_actions, not tool_errors)."""


# ---------------------------------------------------------------- spaces


class TextSpace(Space[str]):
    """Any ``str`` of at most ``max_length`` characters (any Unicode).

    ``accept_messages=True`` (the action space) also accepts a mapping: an OpenAI assistant message.
    ``sample`` draws short strings from a small mixed-script alphabet with the space's seeded
    ``np_random``, so seeded sampling is reproducible (``check_env`` relies on that).
    """

    ALPHABET = tuple("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,?!-éüß中文∑")
    SAMPLE_MAX = 32

    def __init__(self, max_length: int = DEFAULT_MAX_TEXT, *, accept_messages: bool = False, seed: Any = None):
        if int(max_length) < 1:
            raise ValueError(f"max_length must be positive, got {max_length}")
        self.max_length = int(max_length)
        self.accept_messages = accept_messages
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is not None or probability is not None:
            raise gym_error.Error("TextSpace.sample does not take a mask or probability")
        n = int(self.np_random.integers(0, min(self.SAMPLE_MAX, self.max_length) + 1))
        idx = self.np_random.integers(0, len(self.ALPHABET), size=n)
        return "".join(self.ALPHABET[i] for i in idx)

    def contains(self, x: Any) -> bool:
        if isinstance(x, str):
            return len(x) <= self.max_length
        return self.accept_messages and isinstance(x, Mapping)

    def to_jsonable(self, sample_n):
        return [s if isinstance(s, str) else dict(s) for s in sample_n]

    def from_jsonable(self, sample_n):
        return list(sample_n)

    def __repr__(self) -> str:
        extra = ", accept_messages=True" if self.accept_messages else ""
        return f"TextSpace({self.max_length}{extra})"

    def __eq__(self, other: Any) -> bool:
        return (isinstance(other, TextSpace) and other.max_length == self.max_length
                and other.accept_messages == self.accept_messages)

    __hash__ = None


# Vector support. batch_space, concatenate and iterate already treat an unknown Space as a tuple of
# items (Gymnasium's defaults for custom spaces); registering `iterate` would make the Tuple batch
# iterate each str character by character, so it is deliberately left alone. What the defaults lack:
# an empty batch of "" rather than None, and shared memory (AsyncVectorEnv's default): one slot per
# env of [length, code points...] as int32, read through a live view like Gymnasium's numpy buffers.


@create_empty_array.register(TextSpace)
def _empty_text(space: TextSpace, n: int = 1, fn=np.zeros) -> tuple[str, ...]:
    return ("",) * n


@create_shared_memory.register(TextSpace)
def _text_shared_memory(space: TextSpace, n: int = 1, ctx=None):
    import multiprocessing as mp

    return (ctx or mp).Array(np.dtype(np.int32).char, n * (space.max_length + 1))


class SharedTexts(SequenceABC):
    """A live, read-only view of the strings in a TextSpace shared-memory buffer.

    AsyncVectorEnv builds its observation object once and returns it (deep-copied when ``copy=True``)
    after every step, so the view reads the buffer on each access; deepcopy gives a plain tuple of str.
    """

    def __init__(self, buf: np.ndarray, n: int):
        self._buf, self._n = buf, n

    def _get(self, i: int) -> str:
        row = self._buf[i]
        return row[1: 1 + int(row[0])].astype("<u4").tobytes().decode("utf-32-le")

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self._get(j) for j in range(self._n)[i])
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        return self._get(i)

    def __iter__(self):
        return (self._get(i) for i in range(self._n))

    def __eq__(self, other: Any) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, SharedTexts) else other)

    __hash__ = None

    def __repr__(self) -> str:
        return repr(tuple(self))

    def __deepcopy__(self, memo) -> tuple[str, ...]:
        return tuple(self)

    def __copy__(self) -> tuple[str, ...]:
        return tuple(self)

    def __reduce__(self):
        return (tuple, (tuple(self),))


@read_from_shared_memory.register(TextSpace)
def _read_text(space: TextSpace, shared_memory, n: int = 1) -> SharedTexts:
    buf = np.frombuffer(shared_memory.get_obj(), dtype=np.int32).reshape(n, space.max_length + 1)
    return SharedTexts(buf, n)


@write_to_shared_memory.register(TextSpace)
def _write_text(space: TextSpace, index: int, value: str, shared_memory) -> None:
    codes = np.frombuffer(value.encode("utf-32-le"), dtype="<u4").astype(np.int32)
    if len(codes) > space.max_length:
        raise ValueError(f"observation of {len(codes)} characters exceeds the space's {space.max_length}")
    row = np.frombuffer(shared_memory.get_obj(), dtype=np.int32)[index * (space.max_length + 1):
                                                                   (index + 1) * (space.max_length + 1)]
    row[0] = len(codes)
    row[1: 1 + len(codes)] = codes


# ---------------------------------------------------------------- rendering


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, with a marker saying how much was dropped."""
    if len(text) <= limit:
        return text
    kept = limit
    for _ in range(3):  # the marker's length depends on the count it prints; this settles in two rounds
        marker = f"\n[... {len(text) - kept} characters truncated]"
        kept = max(0, limit - len(marker))
    return text[:kept] + f"\n[... {len(text) - kept} characters truncated]"


def tool_block(name: str, call_id: str, content: str) -> str:
    """One tool result as the agent sees it in the observation."""
    return f'<tool_response name="{name}" id="{call_id}">\n{content}\n</tool_response>'


def format_messages(messages: list[dict[str, Any]]) -> str:
    """A chat as readable text: one block per message, tool calls shown as ``name(args)``."""
    out = []
    for m in messages:
        role = m.get("role", "?")
        if role == "tool":
            head = f"[tool {m.get('name', '')} {m.get('tool_call_id', '')}]".replace("  ", " ")
        else:
            head = f"[{role}]"
        body = []
        if m.get("reasoning_content"):
            body.append("<think>\n" + m["reasoning_content"] + "\n</think>")
        if m.get("content"):
            body.append(m["content"])
        for tc in m.get("tool_calls") or []:
            fn = tc.get("function", {})
            args = fn.get("arguments", "")
            args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
            body.append(f"-> {fn.get('name')}({args})  [{tc.get('id', '')}]")
        out.append(head + ("\n" + "\n".join(body) if body else ""))
    return "\n\n".join(out) + "\n"


# ---------------------------------------------------------------- the env


class PackEnv(gymnasium.Env[str, Any]):
    """A pack as a text Gymnasium env: reset picks a task, each step is one assistant message.

    Args:
        pack: a Pack, a pack directory, or ``hf://ORG/NAME[@REV]``.
        sandbox: backend for ``open_sandbox`` ("local", "docker", "auto", "remote:URL"); started at the first reset,
            kept across episodes (each episode resets it), closed by ``close()``.
        tool_format: how text actions write tool calls (see ``envgen.episodes.actions.PARSE_FORMATS``); OpenAI
            JSON mappings are accepted under every format.
        max_turns: assistant messages per episode before truncation (default: the pack's limit).
        task_ids: the tasks a reset without ``options["task_id"]`` draws from (default: all).
        max_text: the observation/action space bound; longer observations are clipped with a marker.
        sandbox_options: keyword arguments for the sandbox backend.
        system_prompt: envgen's episode rules, the last part of the system message, after the pack's
            ``instructions`` and the task's own system message (``envgen.episodes.prompt``); None or "" for
            none (the pack's and the task's parts stay).
        render_mode: None or "ansi" (``render()`` returns the transcript text).
        judge: grades ``rubric`` tasks on the host after the sandbox's check: a ``envgen.llm.judge.RubricJudge``
            or its spec ``MODEL?base_url=..&votes=K`` (None: the sandbox's deterministic answer check).
        user: the simulated user of tasks with a user spec: ``scripted`` or ``openai:MODEL?base_url=..``
            (``envgen.episodes.users``; default: the pack's ``user_model``, else scripted).
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(self, pack: Any, sandbox: str = "local", tool_format: str = "auto", max_turns: int | None = None,
                 task_ids: list[str] | None = None, max_text: int = DEFAULT_MAX_TEXT,
                 sandbox_options: dict[str, Any] | None = None, system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
                 render_mode: str | None = None, judge: Any = None, user: str | None = None):
        self.pack = open_pack(pack)
        self.user_model = user if user is not None else self.pack.manifest.user_model
        parse_user_model(self.user_model)  # an InputError for a bad spelling, before any episode
        canonical_format(tool_format, PARSE_FORMATS)
        check_backend(sandbox)
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise InputError(f"unknown render_mode {render_mode!r}; use None or 'ansi'")
        if int(max_text) < MIN_MAX_TEXT:
            raise InputError(f"max_text must be at least {MIN_MAX_TEXT}, got {max_text}")
        limits = self.pack.manifest.limits
        self.max_turns = int(max_turns) if max_turns is not None else limits.max_turns
        if self.max_turns < 1:
            raise InputError(f"max_turns must be at least 1, got {max_turns}")
        if task_ids is None:
            task_ids = [t.id for t in self.pack.tasks]
        else:
            task_ids = list(task_ids)
            for tid in task_ids:
                self.pack.task(tid)  # raises PackError naming the unknown id
        if not task_ids:
            raise InputError(f"pack {self.pack.manifest.name!r} ({self.pack.root}) has no tasks to run")
        self.task_ids = task_ids
        self.tool_format = tool_format
        self.backend = sandbox
        self.sandbox_options = dict(sandbox_options or {})
        self.system_prompt = system_prompt
        self.render_mode = render_mode
        self.max_text = int(max_text)
        self.episode_timeout_s = limits.episode_timeout_s
        self.observation_space = TextSpace(self.max_text)
        self.action_space = TextSpace(self.max_text, accept_messages=True)

        if isinstance(judge, str):
            judge = make_judge(judge)
        self.judge = judge
        self._sandbox = None
        self._episode = None
        self._task = None
        self._user = None
        self._conversation: list[dict[str, str]] = []
        self._tools: list[dict[str, Any]] = []
        self._messages: list[dict[str, Any]] = []
        self._done = True
        self._counters: dict[str, int] = {}
        self._last_details: dict[str, Any] | None = None

    # -- helpers

    @property
    def spec(self):
        """The EnvSpec ``gymnasium.make`` gave this env, with ``max_episode_steps`` = ``max_turns`` (the
        env truncates itself at that turn; ``make`` adds no TimeLimit for it, so nothing counts twice)."""
        return self.__dict__.get("_spec")

    @spec.setter
    def spec(self, value) -> None:
        if value is not None and value.max_episode_steps is None and "max_turns" in self.__dict__:
            value = dataclasses.replace(value, max_episode_steps=self.max_turns)
        self.__dict__["_spec"] = value

    @property
    def task(self):
        """The current episode's Task (None before the first reset)."""
        return self._task

    @property
    def sandbox(self):
        """The sandbox, started on first use: AsyncVectorEnv builds a throwaway env in the parent process
        just to read the spaces, and that one should not start a runtime."""
        if self._sandbox is None:
            self._sandbox = open_sandbox(self.pack, self.backend, **self.sandbox_options)
            if self.judge is not None:
                self._sandbox = JudgedSandbox(self._sandbox, self.judge)
        return self._sandbox

    def _info(self) -> dict[str, Any]:
        info = {"task_id": self._task.id, "messages": copy.deepcopy(self._messages),
                "tools": copy.deepcopy(self._tools), **self._counters}
        if self._task.user is not None:
            info["conversation"] = copy.deepcopy(self._episode.messages)
        if self._last_details is not None:
            info["reward_details"] = copy.deepcopy(self._last_details)
        return info

    # -- Gymnasium API

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode: ``options={"task_id": ID}`` picks the task, else a seeded draw from task_ids."""
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = set(options) - {"task_id"}
        if unknown:
            raise InputError(f"unknown reset option(s) {sorted(unknown)}; PackEnv.reset takes options={{'task_id': ID}}")
        task_id = options.get("task_id")
        if task_id is None:
            task_id = self.task_ids[int(self.np_random.integers(len(self.task_ids)))]
        task = self.pack.task(task_id)
        self._episode = Episode(self.sandbox, task)
        self._task = task
        self._tools = self.pack.tools_for(task)
        prompt = agent_prompt(self.pack, task, episode_rules(task, self.system_prompt))
        self._user = make_user(task.user, self.user_model) if task.user is not None else None
        self._conversation = opening(self.pack, task, self._user)
        self._messages = prompt + ([dict(m) for m in self._conversation]
                                   if agent_speaks_first(self.pack.manifest, task) else [])
        for m in self._conversation:
            self._episode.record_message(m["role"], m["content"], 0)
        self._counters = {"turns": 0, "tool_calls": 0, "invalid_actions": 0, "tool_errors": 0, "user_turns": 0}
        self._last_details = None
        self._done = False
        obs = "\n\n".join(m["content"] for m in self._conversation if m["role"] == "user")
        return clip(obs, self.max_text), self._info()

    def step(self, action: Any) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._episode is None or self._done:
            raise gym_error.ResetNeeded("call reset() before step(): the episode is over or has not started")
        c = self._counters
        c["turns"] += 1
        turn = c["turns"]
        try:
            parsed = parse_action(action, self.tool_format, id_prefix=f"call_{turn}_")
        except ActionError as e:
            c["invalid_actions"] += 1
            raw = action if isinstance(action, str) else json.dumps(action, ensure_ascii=False, default=str)
            obs = f"Error ({e.code}): {e}"
            self._episode.record_message("assistant", raw, turn)
            self._messages += [{"role": "assistant", "content": raw}, {"role": "user", "content": obs}]
            return self._after_turn(clip(obs, self.max_text))

        self._messages.append(parsed.to_message())
        self._episode.record_message("assistant", parsed.content or "", turn)
        if not parsed.tool_calls and self._user is not None:
            return self._to_user(parsed.content, turn)
        if not parsed.tool_calls:
            verdict = self._episode.finish(parsed.content)
            self._done = True
            self._last_details = dict(verdict.details)
            return "", float(verdict.reward), True, False, self._info()

        blocks = []
        for call in parsed.tool_calls:
            if self._episode.elapsed >= self.episode_timeout_s:
                content = "Error (episode_timeout): not run, the episode's time limit was reached"
            else:
                result = self._episode.call(call.name, call.arguments, turn=turn)
                c["tool_calls"] += 1
                content = result.content
                if not result.ok:
                    kind = (result.error or {}).get("type", "error")
                    c["invalid_actions" if kind in INVALID_CODES else "tool_errors"] += 1
            self._messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content})
            blocks.append(tool_block(call.name, call.id, content))
        return self._after_turn(clip("\n\n".join(blocks), self.max_text))

    def _to_user(self, content: str, turn: int) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        """A user task's message without a tool call: the simulated user replies (the observation); when it
        ends the conversation, the verifier judges the episode with the agent's last message as the answer."""
        self._conversation.append({"role": "assistant", "content": content})
        text, done = self._user.reply(list(self._conversation))
        self._conversation.append({"role": "user", "content": text})
        self._messages.append({"role": "user", "content": text})
        self._episode.record_message("user", text, turn)
        self._counters["user_turns"] += 1
        if done:
            verdict = self._episode.finish(content)
            self._done = True
            self._last_details = dict(verdict.details)
            return "", float(verdict.reward), True, False, self._info()
        return self._after_turn(clip(text, self.max_text))

    def _after_turn(self, obs: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Truncate on turns or time; the verifier is not run for a truncated episode (reward 0)."""
        reason = None
        if self._counters["turns"] >= self.max_turns:
            reason, msg = "max_turns", f"no final answer within {self.max_turns} turns"
        elif self._episode.elapsed >= self.episode_timeout_s:
            reason, msg = "episode_timeout", f"no final answer within {self.episode_timeout_s:g} s"
        if reason is None:
            return obs, 0.0, False, False, self._info()
        self._done = True
        self._last_details = {"truncated": reason, "verified": False, "message": msg}
        return obs, 0.0, False, True, self._info()

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return format_messages(self._messages)

    def close(self) -> None:
        """Close the sandbox (idempotent); the env can be reset again afterwards, starting a new one."""
        sbx, self._sandbox = self._sandbox, None
        self._episode, self._done = None, True
        if sbx is not None:
            sbx.close()
        super().close()


def register_envs() -> None:
    """Register ``envgen/Pack-v0`` with Gymnasium (idempotent: a second import does not re-register)."""
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(id=ENV_ID, entry_point="envgen.episodes.gym:PackEnv")

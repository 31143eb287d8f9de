"""Packs as TRL ``environment_factory`` classes, pack datasets, and the verifier reward.

TRL's ``GRPOTrainer(environment_factory=...)`` builds one instance per rollout, calls ``reset(**row)``
before each rollout, and exposes every public method of the class as a tool, reading its signature,
type hints and Google-style docstring with ``transformers.utils.get_json_schema``. So a pack's tool
schemas are turned into real methods (keyword-only parameters with the schema's types, a docstring
naming every argument) and everything else on the class is private. Each instance drives one sandbox
session of the pack through ``envgen.episodes.episode.Episode``, so tool calls are recorded and judged exactly as
in ``PackEnv`` and the pass check.

A pack whose tasks have a simulated user (``Task.user``) gets one more method, ``message_user(message)``: TRL's
loop ends a rollout at the first message without a tool call and has no hook to answer it with a user
message, so in training the agent talks to the user through this tool (the user's reply is its result; the
dataset's episode rules say so, ``TRL_USER_RULES``), and its message without a tool call is the final answer.
Both sides are recorded in the episode's ``messages`` like in ``PackEnv``.

The reward is ``verifier_reward`` rather than a ``get_reward`` method: TRL calls ``get_reward()`` with no
arguments and one environment after another, but the verifier needs the final answer (it lives in the
completion) and a batch of verifications should run concurrently.
"""

from __future__ import annotations

import atexit
import inspect
import keyword
import re
import threading
import weakref
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Iterable, Literal, Optional, Union

from ..episodes.episode import Episode, opening
from ..errors import EnvgenError, InputError
from ..episodes.prompt import DEFAULT_SYSTEM_PROMPT, agent_prompt, episode_rules
from ..episodes.users import make_user, parse_user_model
from ..pack.format import Pack, Task, ToolSchema, agent_speaks_first
from ..pack.resolve import open_pack
from ..sandbox import open_sandbox

RESERVED = ("reset", "get_reward")
"""Method names TRL treats specially; a pack tool may not use them."""

USER_TOOL = "message_user"
"""The method through which the agent talks to a task's simulated user in TRL's loop."""

TRL_USER_RULES = (
    "You are an agent helping a user, working through the tools you are given. Call tools to gather "
    f"information and act; you may call several in one message. To talk to the user, call `{USER_TOOL}`: its "
    "result is the user's reply. Ask the user for what you need and tell them the outcome that way. When you "
    "are done, reply with your final answer and no tool call: that message ends the episode."
)
"""The episode rules of a user task in a TRL dataset (``pack_dataset``), in place of ``USER_SYSTEM_PROMPT``."""

ENDED = "The user has ended the conversation. Reply with your final answer and no tool call."


class _Omitted:
    """Default of an optional tool argument: dropped before the call so the tool's own default applies."""

    def __repr__(self) -> str:
        return "<omitted>"


OMITTED = _Omitted()


def pack_key(pack: Pack) -> str:
    """The name a pack goes by in datasets, environment dicts and metrics: its manifest name."""
    return pack.manifest.name


# ---------------------------------------------------------------- tool methods from JSON schemas

_SCALARS = {"string": str, "integer": int, "number": float, "boolean": bool, "null": type(None)}


def _annotation(schema: Any) -> Any:
    """The Python type hint whose ``get_json_schema`` rendering is closest to a JSON schema.

    Nested object properties have no type-hint form and come out as ``dict``; the sandbox still
    validates arguments against the pack's full schema.
    """
    if not isinstance(schema, dict):
        return Any
    if "enum" in schema and all(isinstance(v, (str, int, float, bool)) or v is None for v in schema["enum"]):
        return Literal[tuple(schema["enum"])] if schema["enum"] else Any
    if "const" in schema and isinstance(schema["const"], (str, int, float, bool)):
        return Literal[schema["const"]]
    for union in ("anyOf", "oneOf"):
        if isinstance(schema.get(union), list) and schema[union]:
            return Union[tuple(_annotation(s) for s in schema[union])]
    kind = schema.get("type")
    if isinstance(kind, list):
        hints = tuple(_annotation({**schema, "type": k}) for k in kind)
        return Union[hints] if len(hints) > 1 else (hints[0] if hints else Any)
    if kind in _SCALARS:
        hint = _SCALARS[kind]
    elif kind == "array":
        hint = list[_annotation(schema["items"])] if isinstance(schema.get("items"), dict) else list
    elif kind == "object":
        extra = schema.get("additionalProperties")
        hint = dict[str, _annotation(extra)] if isinstance(extra, dict) and extra else dict
    else:
        return Any
    return Optional[hint] if schema.get("nullable") else hint


_SECTION = re.compile(r"\b(Args|Returns|Raises):")


def _docstring_safe(text: str) -> str:
    """Text with the section headers transformers' docstring parser splits on (``Args:``, ``Returns:``,
    ``Raises:``) defused, so a description mentioning one is not cut there."""
    return _SECTION.sub(r"\1 -", text or "")


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", _docstring_safe(text)).strip()


def _description(text: str, name: str) -> str:
    return _docstring_safe(text).strip() or f"Call the pack tool `{name}`."


def _tool_method(schema: ToolSchema, owner: str):
    """A method ``name(self, *, <schema parameters>)``: runs the tool in the rollout's sandbox, returns its text."""
    fn = schema.function
    name = fn.name
    if name in RESERVED or name.startswith("_"):
        raise InputError(f"pack {owner!r}: tool {name!r} cannot be exposed to TRL (the name is reserved for the "
                          f"environment protocol); rename the tool in the pack")
    props: dict[str, Any] = fn.parameters.get("properties", {}) or {}
    required = set(fn.parameters.get("required", []) or [])
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    arg_docs = []
    for pname, pschema in props.items():
        if not pname.isidentifier() or keyword.iskeyword(pname) or pname == "self":
            raise InputError(f"pack {owner!r}: tool {name!r} has a parameter {pname!r} that is not a Python "
                              "identifier; TRL exposes tools as Python methods, so rename it in the pack")
        hint = _annotation(pschema)
        annotations[pname] = hint
        params.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY,
                                        default=inspect.Parameter.empty if pname in required else OMITTED,
                                        annotation=hint))
        desc = _one_line(pschema.get("description", "") if isinstance(pschema, dict) else "") or pname
        arg_docs.append(f"    {pname}: {desc}")
    signature = inspect.Signature(params)  # no return hint: the schema the model sees is the pack's, parameters only

    def tool(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)  # a TypeError here is what TRL reports for bad arguments
        call_args = {k: v for k, v in bound.arguments.items() if k != "self" and v is not OMITTED}
        return self._call(name, call_args)

    doc = _description(fn.description, name)
    if arg_docs:
        doc += "\n\nArgs:\n" + "\n".join(arg_docs)
    tool.__name__ = name
    tool.__qualname__ = f"{owner}.{name}"
    tool.__doc__ = doc
    tool.__signature__ = signature
    tool.__annotations__ = annotations
    return tool


# ---------------------------------------------------------------- the environment


class _PackEnvironment:
    """One rollout's view of a pack: the task chosen by ``reset`` and a sandbox session.

    Subclasses made by ``environment_class`` add one public method per pack tool. Everything here is
    private except ``reset`` because TRL exposes every other public method to the model as a tool.
    The sandbox starts on first use and is reset lazily (on the rollout's first tool call or at scoring),
    where the trainer runs rollouts concurrently; TRL calls ``reset`` for a batch one after another.
    """

    _pack: Pack
    _key: str
    _backend: str
    _sandbox_options: dict[str, Any]
    _executor: ThreadPoolExecutor
    _instances: weakref.WeakSet
    _user_model: str | None = None

    def __init__(self) -> None:
        self._sandbox = None
        self._task: Task | None = None
        self._episode: Episode | None = None
        self._user = None
        self._conversation: list[dict[str, str]] = []
        self._user_done = False
        self._lock = threading.Lock()
        type(self)._instances.add(self)

    def reset(self, **row: Any) -> None:
        """Start the row's task; the prompt comes from the dataset row, so there is no extra observation."""
        pack = row.get("pack")
        if pack is not None and pack != self._key:
            raise InputError(f"a row of pack {pack!r} reached the environment of pack {self._key!r}; "
                              "give each pack its own entry in the environment dict")
        task_id = row.get("task_id")
        if task_id is None:
            raise InputError(f"pack {self._key!r}: the dataset row has no 'task_id' column; build the dataset "
                              "with envgen.rl.pack_dataset")
        self._task = self._pack.task(task_id)
        self._episode = None
        self._user = make_user(self._task.user, self._user_model) if self._task.user is not None else None
        self._conversation = opening(self._pack, self._task)  # what the dataset row shows (the spec's opening)
        self._user_done = False
        return None

    # -- private protocol used by the tool methods, the reward and the trainer

    def _ensure_episode(self) -> Episode:
        if self._task is None:
            raise InputError(f"pack {self._key!r}: a tool was called before reset()")
        if self._episode is None:
            if self._sandbox is None:
                self._sandbox = open_sandbox(self._pack, self._backend, **self._sandbox_options)
            self._episode = Episode(self._sandbox, self._task)
            for m in self._conversation:
                self._episode.record_message(m["role"], m["content"], 0)
        return self._episode

    def _message_user(self, message: str) -> str:
        """The simulated user's reply to ``message`` (recorded with it; TRL's loop has no turn numbers)."""
        with self._lock:
            episode = self._ensure_episode()
            if self._user is None:
                return f"Error (no_user): this task has no user to message; do not call {USER_TOOL}"
            if self._user_done:
                return ENDED
            episode.record_message("assistant", message, None)
            self._conversation.append({"role": "assistant", "content": message})
            text, self._user_done = self._user.reply(list(self._conversation))
            self._conversation.append({"role": "user", "content": text})
            episode.record_message("user", text, None)
            return text + ("\n\n" + ENDED if self._user_done else "")

    def _call(self, tool: str, args: dict[str, Any]) -> str:
        with self._lock:
            return self._ensure_episode().call(tool, args).content

    def _finish(self, answer: str | None) -> float:
        """The verifier's reward for this rollout; an episode without a final answer scores 0 unjudged."""
        with self._lock:
            episode = self._ensure_episode()
            if answer is None:
                return 0.0
            return float(episode.finish(answer).reward)

    @property
    def _calls(self) -> list[dict[str, Any]]:
        return self._episode.calls if self._episode is not None else []

    def _close(self) -> None:
        sbx, self._sandbox, self._episode = self._sandbox, None, None
        if sbx is not None:
            sbx.close()

    def __del__(self):
        try:
            self._close()
        except Exception:
            pass


def _close_all(cls: type[_PackEnvironment]) -> None:
    for env in list(cls._instances):
        env._close()
    cls._executor.shutdown(wait=False, cancel_futures=True)


def _class_name(key: str) -> str:
    words = re.findall(r"[A-Za-z0-9]+", key)
    return "".join(w[:1].upper() + w[1:] for w in words) + "Environment" if words else "PackEnvironment"


def _user_method():
    def message_user(self, message):
        return self._message_user(message)

    message_user.__doc__ = ("Send a message to the user and get the user's reply.\n\nArgs:\n"
                            "    message: what you say to the user")
    message_user.__annotations__ = {"message": str}
    return message_user


def environment_class(pack: Pack | str, sandbox: str = "local", max_concurrency: int = 8, *,
                      tools: Iterable[str] | None = None, user: str | None = None,
                      **sandbox_options: Any) -> type[_PackEnvironment]:
    """A TRL ``environment_factory`` class for ``pack``: one sandbox session per instance (rollout).

    ``sandbox`` is the backend (``local``, ``docker``, ``auto``); ``max_concurrency`` bounds how many
    sandboxes of this pack run tool calls or verifications at the same time (the trainer and
    ``verifier_reward`` submit to the class's executor). ``tools`` limits the exposed tools (default: all
    of the pack's); a task's own tool list is still enforced by the episode. A pack with simulated-user tasks
    also gets ``message_user`` (module docstring); ``user`` picks the user (``scripted`` or
    ``openai:MODEL?..``; default: the pack's ``user_model``, else scripted).
    """
    pack = open_pack(pack)
    if max_concurrency < 1:
        raise InputError(f"max_concurrency must be at least 1, got {max_concurrency}")
    key = pack_key(pack)
    name = _class_name(key)
    wanted = None if tools is None else list(tools)
    if wanted is not None:
        unknown = sorted(set(wanted) - set(pack.manifest.tool_names))
        if unknown:
            raise InputError(f"pack {key!r} has no tools {unknown}; it has {pack.manifest.tool_names}")
    ns: dict[str, Any] = {
        "__doc__": f"TRL environment for pack {key!r} ({pack.manifest.description or pack.manifest.family}).",
        "__module__": __name__,
        "_pack": pack,
        "_key": key,
        "_backend": sandbox,
        "_sandbox_options": dict(sandbox_options),
        "_executor": ThreadPoolExecutor(max_concurrency, thread_name_prefix=f"envgen-{key}"),
        "_instances": weakref.WeakSet(),
        "_user_model": user if user is not None else pack.manifest.user_model,
    }
    parse_user_model(ns["_user_model"])
    if any(t.user is not None for t in pack.tasks):
        if USER_TOOL in pack.manifest.tool_names:
            raise InputError(f"pack {key!r}: a tool is named {USER_TOOL!r}, the name TRL training uses for talking to "
                             "the simulated user; rename the tool in the pack")
        ns[USER_TOOL] = _user_method()
    for schema in pack.manifest.tools:
        if wanted is None or schema.name in wanted:
            ns[schema.name] = _tool_method(schema, name)
    cls = type(name, (_PackEnvironment,), ns)
    atexit.register(_close_all, cls)
    return cls


def environment_factories(packs: Iterable[Pack | str], sandbox: str = "local", max_concurrency: int = 8,
                          user: str | None = None, **sandbox_options: Any) -> dict[str, type[_PackEnvironment]]:
    """``{pack key: environment class}`` for TRL's dict ``environment_factory`` (several packs in one run)."""
    out: dict[str, type[_PackEnvironment]] = {}
    for ref in packs:
        cls = environment_class(ref, sandbox, max_concurrency, user=user, **sandbox_options)
        if cls._key in out:
            raise InputError(f"two packs are named {cls._key!r}; rename one (its manifest 'name') to train both")
        out[cls._key] = cls
    return out


# ---------------------------------------------------------------- datasets


def _default_system_prompt() -> str:
    return DEFAULT_SYSTEM_PROMPT


def pack_dataset(packs: Pack | str | Iterable[Pack | str], *, system_prompt: str | None = "default",
                 environment: bool | None = None):
    """A ``datasets.Dataset`` of prompts, one row per task: ``prompt``, ``task_id``, ``pack`` and, for
    several packs (or ``environment=True``), ``environment`` (the key TRL's dict factory routes on).

    Each prompt is what ``PackEnv`` shows the agent (``envgen.episodes.prompt.agent_prompt``): one system
    message made of the pack's ``instructions``, the task's own system message and ``system_prompt`` (envgen's
    episode rules; ``"default"``: the gym's, and for a task with a simulated user ``TRL_USER_RULES``; ``None``: no
    rules, the pack's and task's parts stay), then the task's other messages. In a pack whose agent speaks first
    (``Manifest.agent_first``), a user task's prompt ends with the pack's greeting and the spec's ``opening``: a
    dataset is written before any rollout, so even an LLM user starts from the spec's opening there.
    """
    from datasets import Dataset

    if isinstance(packs, (Pack, str)) or hasattr(packs, "__fspath__"):
        packs = [packs]
    loaded = [open_pack(p) for p in packs]
    if environment is None:
        environment = len(loaded) > 1
    system = _default_system_prompt() if system_prompt == "default" else system_prompt
    rows = []
    for pack in loaded:
        for task in pack.tasks:
            prompt = agent_prompt(pack, task, episode_rules(task, system, TRL_USER_RULES))
            if agent_speaks_first(pack.manifest, task):
                prompt += opening(pack, task)
            row = {"prompt": prompt, "task_id": task.id, "pack": pack_key(pack)}
            if environment:
                row["environment"] = pack_key(pack)
            rows.append(row)
    if not rows:
        raise InputError(f"no tasks in {', '.join(pack_key(p) for p in loaded)}; nothing to train on")
    return Dataset.from_list(rows)


# ---------------------------------------------------------------- the reward


def final_answer(messages: list[dict[str, Any]]) -> str | None:
    """The rollout's final answer: the last assistant message when it makes no tool call, else None."""
    for msg in reversed(messages or []):
        if msg.get("role") == "assistant":
            if msg.get("tool_calls"):
                return None
            content = msg.get("content")
            return content if isinstance(content, str) else ""
        if msg.get("role") == "tool":
            return None
    return None


def verifier_reward(completions: list, environments: list | None = None, log_metric=None,
                    truncated_completion_reward: list | None = None, **_: Any) -> list:
    """TRL reward function: each rollout's pack verifier, run concurrently across rollouts.

    A completion without a final answer (it ended on a tool call) scores 0 without running the verifier,
    as in ``PackEnv``; so does one ``EnvgenGRPOTrainer`` marks truncated (its
    ``truncated_completion_reward`` column holds the score, None for a complete completion): a
    half-written answer is never judged. A rollout whose sandbox failed scores None (TRL leaves it out
    of the baseline). Logs per pack: mean reward, tool calls per rollout, tool error rate, answered and
    truncated fractions.
    """
    if environments is None:
        raise InputError("verifier_reward needs TRL's `environments` (pass environment_factory to GRPOTrainer)")
    cut = list(truncated_completion_reward or [None] * len(completions))
    futures: list[Future | float | None] = []
    answers = []
    for completion, env, fixed in zip(completions, environments, cut, strict=True):
        if not isinstance(env, _PackEnvironment):
            futures.append(None)
            answers.append(None)
            continue
        answer = final_answer(completion) if isinstance(completion, list) else completion
        answers.append(answer)
        futures.append(float(fixed) if fixed is not None else type(env)._executor.submit(env._finish, answer))
    rewards: list[float | None] = []
    stats: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for env, fut, answer, fixed in zip(environments, futures, answers, cut):
        if fut is None:
            rewards.append(None)
            continue
        try:
            reward: float | None = fut if isinstance(fut, float) else fut.result()
        except EnvgenError:
            reward = None
        rewards.append(reward)
        st = stats[env._key]
        if reward is None:
            st["sandbox_errors"].append(1.0)
            continue
        calls = env._calls
        st["reward"].append(reward)
        st["truncated"].append(0.0 if fixed is None else 1.0)
        st["tool_calls"].append(float(len(calls)))
        st["tool_errors"].extend(0.0 if c.get("ok") else 1.0 for c in calls)
        st["answered"].append(0.0 if answer is None else 1.0)
        st["sandbox_errors"].append(0.0)
    if log_metric is not None:
        for key, st in stats.items():
            for name, values in st.items():
                if values:
                    log_metric(f"envgen/{key}/{name}", sum(values) / len(values))
    return rewards


verifier_reward.__name__ = "verifier"


def env_tools(environment: Any) -> list:
    """The bound tool methods TRL exposes for ``environment``, in TRL's order (``inspect.getmembers``)."""
    members = inspect.getmembers(type(environment), predicate=inspect.isfunction)
    return [getattr(environment, name) for name, _ in members if not name.startswith("_") and name not in RESERVED]

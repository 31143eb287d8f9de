"""The ``Policy`` interface every policy implements (oracle, null, OpenAI endpoint, local HF model).

Apart from ``builtin`` (the policies and the episode runner) so that ``hf`` can implement the interface while
``builtin.make_policy`` builds HF policies: both import this module, neither imports the other's caller.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any


class Policy(ABC):
    """Chooses the assistant's next message."""

    name = "policy"
    tokens = 0
    """Tokens spent since the last ``begin`` (model policies count them; others spend none)."""

    def bind(self, env: Any) -> None:
        """Called by ``rollout`` before an episode with the env it will act in (unwrapped inside)."""

    def begin(self, seed: int | None) -> None:
        """Called by ``rollout`` at the start of each episode: sampling policies seed themselves here."""
        self.tokens = 0

    @abstractmethod
    def act(self, observation: str, info: dict[str, Any]) -> str | dict[str, Any]:
        """The next assistant message: OpenAI JSON (a dict) or raw model text."""

    def act_batch(self, observations: Any, infos: dict[str, Any]) -> tuple[Any, ...]:
        """Actions for a vector env's batch: each sub-env's info is sliced out of the batched ``infos``."""
        return tuple(self.act(obs, unbatch_info(infos, i)) for i, obs in enumerate(observations))


def unbatch_info(infos: dict[str, Any], i: int) -> dict[str, Any]:
    """Sub-env ``i``'s info from a Gymnasium vector env's batched info (keys whose ``_key`` mask is set)."""
    out = {}
    for key, value in infos.items():
        if key.startswith("_"):
            continue
        mask = infos.get("_" + key)
        if mask is not None and not mask[i]:
            continue
        out[key] = unbatch_info(value, i) if isinstance(value, dict) else value[i]
    return out

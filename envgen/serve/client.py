"""A typed-enough OpenEnv client for ``envgen serve`` episodes (any ``EnvClient`` works; this one adds the token).

    with EnvgenClient("http://HOST:PORT", token=...).sync() as env:
        r = env.reset(task_id="t-1")            # r.observation["text"]: the prompt; ["info"]: tools, task id
        r = env.step({"content": "", "tool_calls": [...]})   # or raw model text
        r.reward, r.done
"""

from __future__ import annotations

import os
from typing import Any

from ..sandbox.remote import TOKEN_ENV, _client_class


class EnvgenClient(_client_class()):
    """OpenEnv's ``EnvClient`` for envgen episodes: a step's action is the assistant's message (text, or an
    OpenAI message dict); the token is ``token``, else ENVGEN_SERVE_TOKEN."""

    def __init__(self, base_url: str, token: str | None = None, **kw: Any):
        super().__init__(base_url, token or os.environ.get(TOKEN_ENV), **kw)

    def _step_payload(self, action: Any) -> dict:
        if isinstance(action, dict) and "op" in action:
            return action
        return {"op": "message", "message": action}

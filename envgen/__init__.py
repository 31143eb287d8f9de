"""envgen: a factory for verifiable, tool-using RL environments for LLM agents, and the gym that runs them.

Importing envgen registers the Gymnasium env ``envgen/Pack-v0``; the import stays light (gymnasium only).
"""

__version__ = "0.1.0"

from .gym import register_envs as _register; _register()  # noqa: E402, E702

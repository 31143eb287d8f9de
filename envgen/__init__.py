"""envgen: a factory for verifiable, tool-using RL environments for LLM agents, and the gym that runs them.

Importing envgen registers the Gymnasium env ``envgen/Pack-v0``; the import stays light (gymnasium only).
"""

__version__ = "0.1.0"

import gymnasium as _gymnasium  # noqa: E402

if "envgen/Pack-v0" not in _gymnasium.registry:  # by name: envgen.episodes.gym (and what it runs) loads on first make()
    _gymnasium.register(id="envgen/Pack-v0", entry_point="envgen.episodes.gym:PackEnv")

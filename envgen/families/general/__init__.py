"""Tool-use tasks over a SQLite database, verified by programs and whole-database state checks.

Offline category generators (``envs/general/*``) and the LLM agent pipeline (``pipeline``) that builds a
database, tools and tasks for any category; ``static_checks`` vets the code its agents write; ``family``
is the ``Family`` the CLI builds through.
"""

from .family import FAMILY

__all__ = ["FAMILY"]

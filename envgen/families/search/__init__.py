"""Long-tail multi-hop search questions, verified by one exact answer (and a rubric judge).

Offline categories (``envs/search/*``) and the question-construction pipeline over a mined corpus
(``pipeline``); ``family`` is the ``Family`` the CLI builds through.
"""

from .family import FAMILY

__all__ = ["FAMILY"]

"""Test runners by framework name (see ``base`` for the contract). Python's pytest and unittest are
driven by ``envgen_verifiers.tests`` itself and are not listed here. Adding a framework: a module with
a ``Runner`` subclass, listed in ``RUNNERS``."""

from __future__ import annotations

from .base import Runner
from .cxx import CTest, MakeCheck
from .golang import GoTest
from .java import Gradle, Maven
from .node import Jest, Mocha, NodeTest, Vitest
from .phpunit import PHPUnit

RUNNERS: dict[str, Runner] = {r.framework: r for r in (GoTest(), Jest(), Vitest(), Mocha(), NodeTest(), CTest(), MakeCheck(),
                                                         PHPUnit(), Maven(), Gradle())}


def get(framework: str) -> Runner | None:
    """The runner of ``framework``; None for pytest and unittest (the kit's own)."""
    return RUNNERS.get(framework)

"""Write one benchmark's section of bench/RESULTS.md, leaving the other sections as they are."""

from __future__ import annotations

import platform
import re
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def write_section(heading: str, body: str) -> None:
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n\nRatios are measured side by side in one run.\n"
    block = f"## {heading}\n\n{body.strip()}\n"
    pattern = re.compile(rf"^## {re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
    text = pattern.sub(lambda m: block + "\n", text) if pattern.search(text) else text.rstrip() + "\n\n" + block
    RESULTS.write_text(text.rstrip() + "\n")


def ran_on(command: str, *details: str) -> str:
    """The line that opens a section: the command, the machine, Python, the date, and any details."""
    extra = "".join(f", {d}" for d in details)
    return (f"`{command}` on {platform.node() or 'this machine'} "
            f"({platform.python_version()}, {time.strftime('%Y-%m-%d')}{extra}).")

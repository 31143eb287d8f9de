"""JSON lines between the host and a sandbox process, over raw file descriptors (pipes or FIFOs)."""

from __future__ import annotations

import json
import os
import select
import time


class ReplyTooLong(ValueError):
    """A peer wrote more than the channel's bound without ending the line."""


class Channel:
    """JSON lines over a pair of file descriptors (pipes or FIFOs), with deadlines and a bound per line.

    The bound keeps host memory flat whatever the other side writes: a line longer than `max_line`
    bytes raises ReplyTooLong (a ValueError) after reading at most `max_line` + 1 MiB.
    """

    def __init__(self, rfd: int, wfd: int, close=None, max_line: int = 1 << 20):
        self.rfd, self.wfd, self._close, self.max_line = rfd, wfd, close, max_line
        self._buf = bytearray()
        self._poll = select.poll()
        self._poll.register(rfd, select.POLLIN | select.POLLHUP | select.POLLERR)

    def send(self, obj: dict) -> None:
        data = json.dumps(obj, ensure_ascii=False).encode() + b"\n"
        view = memoryview(data)
        while view:
            n = os.write(self.wfd, view)
            view = view[n:]

    def recv(self, deadline: float) -> dict | None:
        """The next reply, or None at the deadline; raises EOFError when the peer is gone."""
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line = bytes(self._buf[:nl])
                del self._buf[: nl + 1]
                reply = json.loads(line)
                if not isinstance(reply, dict):
                    raise ValueError(f"a reply must be a JSON object, got {type(reply).__name__}")
                return reply
            if len(self._buf) > self.max_line:
                self._buf = bytearray()
                raise ReplyTooLong(f"a reply line passed {self.max_line} bytes")
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if not self._poll.poll(left * 1000):
                return None
            chunk = os.read(self.rfd, 1 << 20)
            if not chunk:
                raise EOFError("the peer closed its output")
            self._buf += chunk

    def close(self) -> None:
        if self._close:
            self._close()


def runtime_line_bound(output_limit: int) -> int:
    """Bytes a runtime reply may take: content of `output_limit` characters, each at most 6 bytes of JSON
    (a \\u escape), plus the truncation marker and framing."""
    return 6 * output_limit + (64 << 10)

"""A pytest plugin for validation runs only: which tests, and which test modules while they were collected,
tried to reach another host.

Validation runs have no network, so such a test fails for want of one; its failure text often does not say
so (pydicom's data manager catches the download error, warns, and the test then fails on a missing file).
An audit hook (Python 3.8+) sees every name lookup and connection whatever the code does with the error; it
writes one line per attempt, ``<node id>\\t<host>``, to the file ``ENVGEN_NETPROBE`` names. The node id is
the running test's (``PYTEST_CURRENT_TEST``) or, during collection, the collector's (a module whose import
fetched something); empty before collection (a conftest). Loopback and Unix sockets do not count.

The module is copied next to nothing else (``tests.run_tests``) so importing it brings in no other code;
it uses the standard library only and runs on the task's interpreter, however old (no annotations that
need evaluating, no ``from __future__`` import 3.6 lacks). The verifier's runs never load it.
"""

import os
import sys

_OUT = os.environ.get("ENVGEN_NETPROBE")
_LOCAL = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback", "0.0.0.0", "::", "::1"}
_collecting = [""]
_busy = [False]
_seen = set()


def _host(event, args):
    if event == "socket.connect":
        address = args[1] if len(args) > 1 else None
        return address[0] if isinstance(address, tuple) and address else None  # a str is a Unix socket
    return args[0] if args else None


def _local(host):
    if not host:
        return True
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    host = str(host).strip("[]").lower()
    return host in _LOCAL or host.startswith("127.") or host.startswith("::ffff:127.")


def _where():
    current = os.environ.get("PYTEST_CURRENT_TEST")
    if current:
        return current.rsplit(" (", 1)[0]  # "path::test[params] (call)" -> the node id
    return _collecting[0]


def _hook(event, args):
    if not event.startswith("socket.") or _busy[0]:
        return
    if event not in ("socket.getaddrinfo", "socket.connect", "socket.gethostbyname", "socket.gethostbyname_ex",
                     "socket.gethostbyaddr"):
        return
    host = _host(event, args)
    if _local(host):
        return
    line = f"{_where()}\t{host}\n"
    if line in _seen:
        return
    _seen.add(line)
    _busy[0] = True
    try:
        with open(_OUT, "a", encoding="utf-8") as f:
            f.write(line)
    except OSError:
        pass
    finally:
        _busy[0] = False


def pytest_collectstart(collector):
    _collecting[0] = collector.nodeid


def pytest_collectreport(report):
    _collecting[0] = ""


if _OUT and hasattr(sys, "addaudithook"):
    sys.addaudithook(_hook)


def read(path):
    """The node ids an attempt was recorded for (the file ``_hook`` wrote), each once, in order."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    return list(dict.fromkeys(ln.split("\t", 1)[0] for ln in lines if "\t" in ln))

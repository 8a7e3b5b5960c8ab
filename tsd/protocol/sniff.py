"""Which protocol a new connection speaks, from its first byte.

Theory of operation (behaviour doc §0 "One TCP port"; OpenTSDB 2.4.1
``src/tsd/PipelineFactory.java`` DetectHttpOrRpc): OpenTSDB looks at the first byte only.
``A`` to ``Z`` means HTTP (every method name is upper case), anything else means telnet. So
an upper-case telnet command such as ``PUT ...`` is parsed as HTTP, as in OpenTSDB.
"""

from __future__ import annotations

__all__ = ["looks_like_http"]


def looks_like_http(first: bytes) -> bool:
    """True when a connection whose data starts with ``first`` should be served as HTTP.

    Needs at least one byte: OpenTSDB waits for one before deciding, and so must the caller.
    """
    if not first:
        raise ValueError("looks_like_http needs at least one byte")
    return 0x41 <= first[0] <= 0x5A

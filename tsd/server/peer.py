"""Who is on the other end of a connection, for both protocols on the shared port."""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback"]


def is_loopback(host: str) -> bool:
    """True for a loopback address (``127.0.0.1``, ``::1``, ``fe80::1%lo`` style scopes
    dropped) and for a Unix-domain socket peer, whose host is empty or a path: both are
    this machine. Anything unparseable is remote."""
    if host == "" or host.startswith("/"):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False

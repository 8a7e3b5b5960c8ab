"""The exit statuses every ``tsdb`` command uses: one table, shown by ``tsdb --help``.

The numbers keep OpenTSDB's where it has them (UidManager: 1 not found, 2 usage, 3 storage,
4 a delete left half done); the command line (:mod:`tsd.cli`) maps errors that reach it
onto the same table.
"""

from __future__ import annotations

OK = 0
#: the work failed, wholly or partly: bad input lines, a name not found, a difference found
FAILED = 1
#: bad usage or configuration: the command did nothing
USAGE = 2
#: what the command needs cannot be opened: its store (down, unreachable, held by another
#: daemon; or a storage call failed) or, for ``tsdb tsd``, its listening socket
UNAVAILABLE = 3
#: ``uid delete`` removed one direction of a mapping but not the other
PARTIAL_DELETE = 4
#: stopped before the end on purpose (``tsdb copy --limit-rows``); running it again goes on
STOPPED = 5
#: interrupted (Ctrl-C)
INTERRUPTED = 130

HELP = f"""\
exit status (every command):
  {OK}  done
  {FAILED}  failed, wholly or partly (bad input lines, a name not found, a difference
     found); each problem on one line on stderr
  {USAGE}  bad arguments, usage or configuration; nothing was done
  {UNAVAILABLE}  cannot listen (tsdb tsd: the port in use, an address not on this host), or
     the store cannot be opened or reached, or a storage call failed
  {PARTIAL_DELETE}  uid delete removed one direction of a mapping only
  {STOPPED}  stopped before the end on purpose (copy --limit-rows): run it again to go on
  {INTERRUPTED}  interrupted (Ctrl-C)
messages: results on stdout; errors on stderr as "tsdb COMMAND: message".
tsdb uid keeps OpenTSDB's UidManager statuses (1 not found, 3 storage, 4 delete), the same
table. Beside a running daemon: every tool works on the daemon's embedded store while it
runs (the store is shared; only a second daemon is refused)."""

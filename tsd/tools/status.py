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
#: the store cannot be opened or reached, or a storage call failed
STORAGE = 3
#: ``uid delete`` removed one direction of a mapping but not the other
PARTIAL_DELETE = 4
#: stopped before the end on purpose (``tsdb copy --limit-rows``); running it again goes on
STOPPED = 5
#: interrupted (Ctrl-C)
INTERRUPTED = 130

HELP = f"""\
exit status (every command):
  {OK}    done
  {FAILED}    the work failed, wholly or partly (bad input lines, a name not found,
       a difference found); each problem is one line on stderr
  {USAGE}    bad usage or configuration; nothing was done
  {STORAGE}    the store cannot be opened or reached, or a storage call failed
  {PARTIAL_DELETE}    uid delete removed one direction of a mapping only
  {STOPPED}    stopped before the end on purpose (copy --limit-rows): run it again to go on
  {INTERRUPTED}  interrupted (Ctrl-C)
messages: results on stdout; errors on stderr as "tsdb COMMAND: message".
beside a running daemon: every tool works on the daemon's embedded store while it runs
(it shares the store; only a second daemon is refused)."""

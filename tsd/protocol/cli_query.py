"""The query words of ``tsdb query`` and ``tsdb scan`` (OpenTSDB's
CliQuery.parseCommandLineQuery), turned into ``/api/query`` parameters. Pure.

    START-DATE [END-DATE] [+gnuplot-param...] QUERY [QUERY...]
    QUERY = AGG [rate [counter[,MAX[,RESET]]]] [downsample INTERVAL_MS AGG] METRIC [TAG=V...]
            ["gnuplot options"]

As OpenTSDB does, the second word is the end date when there are more than three words and
it looks like a date (it has ``:``, ``/`` or ``-``, or is a positive number); the
downsampling interval is in milliseconds; ``+param`` words and per-query plot options (a
word with a space) are skipped, as there is no plot. Each query becomes one ``m=``
expression, so its names, aggregators and tags are checked as ``/api/query`` checks them.
"""

from __future__ import annotations

from dataclasses import dataclass

from tsd.errors import UsageError

#: CliQuery.usage, shortened to the words it describes
USAGE = (
    "START-DATE [END-DATE] QUERY [QUERIES...]\n"
    "A query has the form:\n"
    "  FUNC [rate] [counter,max,reset] [downsample N FUNC] SERIES [TAGS]\n"
    "For example:\n"
    " 2010/03/11-20:57 sum my.awsum.metric host=blah sum some.other.metric host=blah state=foo\n"
    "Dates must follow this format: YYYY/MM/DD-HH:MM[:SS] or Unix Epoch\n"
    " or relative time such as 1y-ago, 2d-ago, etc. N is in milliseconds."
)


@dataclass(frozen=True, slots=True)
class CliQuery:
    """The time range and one ``m=`` expression per query, in command-line order."""

    start: str
    end: str | None
    m: tuple[str, ...]


def _looks_like_end(word: str) -> bool:
    if word.startswith("+"):
        return False
    if any(c in word for c in ":/-"):
        return True
    try:
        return int(word) > 0
    except ValueError:  # the aggregator of the first query
        return False


def parse_cli_query(words: list[str]) -> CliQuery:
    """Raises UsageError when the words do not make a query."""
    if len(words) < 2:
        raise UsageError("Not enough arguments.")
    end = words[1] if len(words) > 3 and _looks_like_end(words[1]) else None
    i = 2 if end is not None else 1
    while i < len(words) and words[i].startswith("+"):
        i += 1
    expressions: list[str] = []
    try:
        while i < len(words):
            parts = [words[i]]
            i += 1
            if words[i] == "rate":
                i += 1
                rate = "rate"
                if words[i].startswith("counter"):
                    fields = words[i].split(",")
                    rate += "{" + ",".join((fields + ["", ""])[:3]) + "}"
                    i += 1
                parts.append(rate)
            if words[i] == "downsample":
                parts.append(f"{int(words[i + 1])}ms-{words[i + 2]}")
                i += 3
            metric = words[i]
            i += 1
            tags = []
            while i < len(words) and " " not in words[i][1:] and "=" in words[i][1:]:
                tags.append(words[i])
                i += 1
            if i < len(words) and " " in words[i][1:]:
                i += 1  # gnuplot options of this query
            parts.append(metric + ("{" + ",".join(tags) + "}" if tags else ""))
            expressions.append(":".join(parts))
    except IndexError:
        raise UsageError("Not enough arguments, need at least one query.") from None
    except ValueError:
        raise UsageError(f"Invalid downsampling interval in: {' '.join(words)}") from None
    if not expressions:
        raise UsageError("Not enough arguments, need at least one query.")
    return CliQuery(words[0], end, tuple(expressions))

"""The head finds a scan's rows by group (metric prefix and hour): rows of several
metrics and hours interleaved in one batch each land in their own group."""

from __future__ import annotations

from tsd.codec import KeyLayout, encode_point
from tsd.config import StorageConfig
from tsd.head.head import Head
from tsd.storage.base import ScanSpec
from tsd.write.head_flush import HeadSink

HOUR = 1_356_998_400


def _key(metric: int, hour: int, series: int) -> bytes:
    return (
        metric.to_bytes(3, "big")
        + (HOUR + 3600 * hour).to_bytes(4, "big")
        + series.to_bytes(6, "big")
    )


def test_new_rows_of_several_metrics_and_hours_in_one_batch_each_join_their_group() -> None:
    head = Head(KeyLayout.from_storage_config(StorageConfig()))
    # runs of one group, then others, then the first group again (a batch's rows in order)
    order = [(1, 0, 1), (1, 0, 2), (2, 0, 1), (1, 1, 1), (1, 0, 3), (2, 1, 1), (2, 1, 2)]
    rows = {
        _key(*row): dict([encode_point(HOUR + 3600 * row[1], n)[1:]]) for n, row in enumerate(order)
    }
    _, runs = HeadSink.encode(rows)
    assert head.add_runs(runs, 0, 0.0) == len(order)
    for metric in (1, 2):
        for hour in (0, 1):
            start = metric.to_bytes(3, "big") + (HOUR + 3600 * hour).to_bytes(4, "big")
            stop = metric.to_bytes(3, "big") + (HOUR + 3600 * (hour + 1)).to_bytes(4, "big")
            found = head.snapshot([ScanSpec(start=start, stop=stop)])
            expected = sorted(_key(*row) for row in order if row[:2] == (metric, hour))
            assert sorted(found.keys()) == expected, (metric, hour)


def test_a_filter_with_pinned_pairs_finds_the_rows_its_regexp_finds() -> None:
    # RowFilter.contains (the pinned tag pairs) is checked over every key of a group at
    # once before the regexp: the same rows as the regexp alone, with two tags per key
    # and a wanted value (65793: 01 01 01) that is also another tag's value.
    import itertools
    import re

    from tsd.storage.base import RowFilter

    head = Head(KeyLayout.from_storage_config(StorageConfig()))

    def key(host: int, dc: int) -> bytes:
        tags = b"\x00\x00\x01" + host.to_bytes(3, "big") + b"\x00\x00\x02" + dc.to_bytes(3, "big")
        return (1).to_bytes(3, "big") + HOUR.to_bytes(4, "big") + tags

    keys = [key(h, d) for h, d in itertools.product(range(1, 60), (1, 2, 65793))]
    _, runs = HeadSink.encode({k: dict([encode_point(HOUR, 1)[1:]]) for k in keys})
    head.add_runs(runs, 0, 0.0)
    start, stop = (1).to_bytes(3, "big") + HOUR.to_bytes(4, "big"), (2).to_bytes(3, "big")
    wanted = [b"\x00\x00\x01" + v.to_bytes(3, "big") for v in (2, 7, 65793)]
    regex = b"(?s)^.{7}\\x00\\x00\\x01(?:" + b"|".join(
        re.escape(w[3:]) for w in wanted
    ) + b").*$"  # fmt: skip
    alone = head.snapshot([ScanSpec(start, stop, row_filter=RowFilter(regex))]).keys()
    pinned = RowFilter(regex, (tuple(wanted),))
    both = head.snapshot([ScanSpec(start, stop, row_filter=pinned)]).keys()
    assert sorted(both) == sorted(alone) == sorted(key(h, d) for h in (2, 7) for d in (1, 2, 65793))


def test_pinned_pairs_find_few_rows_and_many_rows_alike() -> None:
    # _GroupPairs.rows_having collects up to _FEW_HITS rows as Python ints and more with
    # numpy: both answer the regexp's rows, one tag's values or two tags' together.
    import itertools
    import re

    from tsd.head.head import _FEW_HITS
    from tsd.storage.base import RowFilter

    head = Head(KeyLayout.from_storage_config(StorageConfig()))
    host_k, dc_k = b"\x00\x00\x01", b"\x00\x00\x02"

    def key(host: int, dc: int) -> bytes:
        tags = host_k + host.to_bytes(3, "big") + dc_k + dc.to_bytes(3, "big")
        return (1).to_bytes(3, "big") + HOUR.to_bytes(4, "big") + tags

    hosts = range(1, 2 * _FEW_HITS + 10)
    keys = [key(h, d) for h, d in itertools.product(hosts, (1, 2, 3))]
    _, runs = HeadSink.encode({k: dict([encode_point(HOUR, 1)[1:]]) for k in keys})
    head.add_runs(runs, 0, 0.0)
    start, stop = (1).to_bytes(3, "big") + HOUR.to_bytes(4, "big"), (2).to_bytes(3, "big")

    def pairs(tagk: bytes, values: list[int]) -> tuple[bytes, ...]:
        return tuple(tagk + v.to_bytes(3, "big") for v in values)

    def alt(values: list[int]) -> bytes:
        return b"(?:" + b"|".join(re.escape(v.to_bytes(3, "big")) for v in values) + b")"

    cases = [
        ([5, 9, 77], None),  # a dashboard's few hosts: few rows
        (list(hosts), [1]),  # every host of one dc: more than _FEW_HITS rows
        ([3, 4], [2, 3]),  # two tags, few
        (list(range(1, _FEW_HITS + 2)), [1, 3]),  # two tags, many
    ]
    for host_values, dc_values in cases:
        regex = b"(?s)^.{7}" + host_k + alt(host_values)
        contains = [pairs(host_k, host_values)]
        if dc_values is not None:
            regex += dc_k + alt(dc_values)
            contains.append(pairs(dc_k, dc_values))
        else:
            regex += b".*"
        alone = head.snapshot([ScanSpec(start, stop, row_filter=RowFilter(regex))]).keys()
        pinned = RowFilter(regex, tuple(contains))
        both = head.snapshot([ScanSpec(start, stop, row_filter=pinned)]).keys()
        expected = [
            key(h, d) for h, d in itertools.product(hosts, (1, 2, 3))
            if h in host_values and (dc_values is None or d in dc_values)
        ]  # fmt: skip
        assert both == alone == expected, (host_values[:3], dc_values)


def test_a_pinned_filter_keeps_finding_its_rows_as_rows_join_and_leave_the_group() -> None:
    # The group's tag pairs are kept between reads (Head._group_pairs): rows joining the
    # hour afterwards, rows leaving it (the list tidied), a key of another length (more
    # tags) and a group emptied and its number reused must all be seen by the next read.
    import re

    from tsd.storage.base import RowFilter

    head = Head(KeyLayout.from_storage_config(StorageConfig()))
    pair = b"\x00\x00\x01"

    def key(host: int, extra: bool = False) -> bytes:
        tags = pair + host.to_bytes(3, "big") + (b"\x00\x00\x02\x00\x00\x09" if extra else b"")
        return (1).to_bytes(3, "big") + HOUR.to_bytes(4, "big") + tags

    def add(keys: list[bytes]) -> None:
        _, runs = HeadSink.encode({k: dict([encode_point(HOUR, 1)[1:]]) for k in keys})
        head.add_runs(runs, 0, 0.0)

    wanted = [pair + v.to_bytes(3, "big") for v in (3, 70, 150)]
    regex = b"(?s)^.{7}\\x00\\x00\\x01(?:" + b"|".join(re.escape(w[3:]) for w in wanted) + b").*$"
    spec = ScanSpec(
        (1).to_bytes(3, "big") + HOUR.to_bytes(4, "big"),
        (1).to_bytes(3, "big") + (HOUR + 3600).to_bytes(4, "big"),
        row_filter=RowFilter(regex, (tuple(wanted),)),
    )

    def found() -> list[bytes]:
        return sorted(head.snapshot([spec]).keys())

    add([key(h) for h in range(100)])
    assert found() == [key(3), key(70)]
    add([key(h) for h in range(100, 200)])  # joined after the first read
    assert found() == [key(3), key(70), key(150)]
    for h in (3, 150):  # left the head; as many joined before the next read
        taken = head.take(key(h))
        assert taken is not None
        head.release(taken)
    add([key(3), key(250)])
    assert found() == [key(3), key(70)]
    taken = head.take(key(3))
    assert taken is not None
    head.release(taken)
    assert found() == [key(70)]
    add([key(3)])  # back, in a freed slot
    assert found() == [key(3), key(70)]
    add([key(150, extra=True)])  # a key with one more tag
    assert found() == [key(3), key(70), key(150, extra=True)]
    for k in head.all_keys():  # the group emptied, its number free for the next
        taken = head.take(k)
        assert taken is not None
        head.release(taken)
    assert found() == []
    add([key(h) for h in (1, 70)])
    assert found() == [key(70)]


def test_a_regexp_filter_keeps_finding_its_rows_as_rows_join_and_leave_the_group() -> None:
    # A filter without pinned pairs (``host=*``, ``host=web*``): the group keeps which of
    # its rows each regexp matched (Head._group_matches), for more regexps than it keeps;
    # rows joining, leaving (the list tidied) and coming back in freed slots, and the group
    # emptied and its number reused are all seen by the next read, as a regexp over every
    # key of the hour finds them.
    import re

    from tsd.head.head import _GROUP_REGEXPS
    from tsd.storage.base import RowFilter

    head = Head(KeyLayout.from_storage_config(StorageConfig()))
    start = (1).to_bytes(3, "big") + HOUR.to_bytes(4, "big")
    stop = (1).to_bytes(3, "big") + (HOUR + 3600).to_bytes(4, "big")

    def key(host: int, tagk: int = 1) -> bytes:
        return start + tagk.to_bytes(3, "big") + host.to_bytes(3, "big")

    def add(keys: list[bytes]) -> None:
        _, runs = HeadSink.encode({k: dict([encode_point(HOUR, 1)[1:]]) for k in keys})
        head.add_runs(runs, 0, 0.0)

    def leave(k: bytes) -> None:
        taken = head.take(k)
        assert taken is not None
        head.release(taken)

    # a tag key (1 or 2), or tag key 1 with a value whose last byte is below a bound
    regexps = [b"(?s)^.{7}\\x00\\x00\\x01.*$", b"(?s)^.{7}\\x00\\x00\\x02.*$"]
    regexps += [b"(?s)^.{7}\\x00\\x00\\x01..[\\x00-" + re.escape(bytes([b])) + b"]$" for b in
                range(5, 5 + 3 * _GROUP_REGEXPS, 3)]  # fmt: skip

    def check(count: int = 3) -> None:  # more than _GROUP_REGEXPS: some dropped
        for regex in regexps[:count]:
            spec = ScanSpec(start, stop, row_filter=RowFilter(regex))
            want = sorted(k for k in head.all_keys() if re.fullmatch(regex, k, re.DOTALL))
            assert sorted(head.snapshot([spec]).keys()) == want, regex

    add([key(h, 1 + h % 2) for h in range(40)])
    check()
    check()
    add([key(h, 1 + h % 2) for h in range(40, 90)])  # joined after the first reads
    check()
    check(len(regexps))
    check()
    for h in (3, 8, 41):
        leave(key(h, 1 + h % 2))
    check()
    add([key(3, 1), key(8, 2), key(200, 1)])  # back in freed slots, the other tag key
    check()
    for k in head.all_keys():  # the group emptied, its number free for the next
        leave(k)
    check()
    add([key(h, 2 - h % 2) for h in range(30)])
    check()

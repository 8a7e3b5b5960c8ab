"""UidService: the three UniqueId instances (metrics, tagk, tagv) of one TSD, from its Config.

The writer calls :meth:`UidService.resolve_many_for_write` for the series it has no row-key
template for (a burst of new series: one batch per kind). The HTTP handlers and CLI tools
use :meth:`by_type`, :meth:`assign` and :meth:`rename`, which take OpenTSDB's type words.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter

from tsd.config import Config
from tsd.errors import BadRequestError, ConfigError, NoSuchUniqueName, TsdError
from tsd.storage.base import Storage
from tsd.uid.cache import UidCache
from tsd.uid.uniqueid import MAX_RANDOM_UID_WIDTH, UidStats, UniqueId


def check_uid_config(config: Config) -> None:
    """ConfigError when the UID settings cannot work: random metric UIDs wider than
    OpenTSDB draws them (7 bytes). The daemon asks before it opens its store."""
    if config.uid.random_metrics and config.storage.metric_width > MAX_RANDOM_UID_WIDTH:
        raise ConfigError(
            "tsd.core.uid.random_metrics",
            f"random metric UIDs are at most {MAX_RANDOM_UID_WIDTH} bytes wide, and"
            f" tsd.storage.uid.width.metric is {config.storage.metric_width}",
        )


#: A series' UIDs: the metric UID and the (tagk UID, tagv UID) pairs.
Resolved = tuple[bytes, list[tuple[bytes, bytes]]]


@dataclass(slots=True)
class ResolvedNames:
    """What :meth:`UidService.resolve_names` found: each kind's ``{name: uid}`` and the
    errors of the names that failed (a name refused by auto-create is in neither)."""

    metric_uids: dict[str, bytes] = field(default_factory=dict)
    key_uids: dict[str, bytes] = field(default_factory=dict)
    value_uids: dict[str, bytes] = field(default_factory=dict)
    metric_errors: dict[str, BaseException] = field(default_factory=dict)
    key_errors: dict[str, BaseException] = field(default_factory=dict)
    value_errors: dict[str, BaseException] = field(default_factory=dict)

    def result(self, metric: str, tags: Sequence[tuple[str, str]]) -> Resolved | TsdError:
        """One series' UIDs (the pairs in the order ``tags`` gives them), or the error of
        its first name that failed (NoSuchUniqueName where auto-create refused it)."""
        metric_uid = self.metric_uids.get(metric)
        if metric_uid is None:
            return _error(self.metric_errors.get(metric), NoSuchUniqueName("metrics", metric))
        key_uids, value_uids = self.key_uids, self.value_uids
        try:  # the common case, every name resolved: one comprehension
            return (metric_uid, [(key_uids[k], value_uids[v]) for k, v in tags])
        except KeyError:
            pass
        pairs: list[tuple[bytes, bytes]] = []
        for key, value in tags:
            key_uid, value_uid = key_uids.get(key), value_uids.get(value)
            if key_uid is None:
                return _error(self.key_errors.get(key), NoSuchUniqueName("tagk", key))
            if value_uid is None:
                return _error(self.value_errors.get(value), NoSuchUniqueName("tagv", value))
            pairs.append((key_uid, value_uid))
        return (metric_uid, pairs)


class UidService:
    """The metrics, tagk and tagv UIDs of one UID table, each with its own bounded cache.

    Auto-create follows OpenTSDB: new metrics are refused unless
    ``tsd.core.auto_create_metrics``; new tag keys and values are created unless
    ``tsd.core.auto_create_tagks`` / ``auto_create_tagvs`` are turned off.
    """

    def __init__(self, storage: Storage, config: Config) -> None:
        check_uid_config(config)
        table = config.storage.uid_table
        max_entries = config.uid.cache_max_entries
        self.metrics = UniqueId(
            storage,
            table,
            "metrics",
            config.storage.metric_width,
            UidCache(max_entries),
            auto_create=config.core.auto_create_metrics,
            block_size=config.uid.block_size,
            random_ids=config.uid.random_metrics,
        )
        self.tagk = UniqueId(
            storage,
            table,
            "tagk",
            config.storage.tagk_width,
            UidCache(max_entries),
            auto_create=config.core.auto_create_tagks,
            block_size=config.uid.block_size,
        )
        self.tagv = UniqueId(
            storage,
            table,
            "tagv",
            config.storage.tagv_width,
            UidCache(max_entries),
            auto_create=config.core.auto_create_tagvs,
            block_size=config.uid.block_size,
        )

    # -- the write path -----------------------------------------------------------------------

    async def resolve_for_write(
        self, metric: str, tags: Iterable[tuple[str, str]]
    ) -> tuple[bytes, list[tuple[bytes, bytes]]]:
        """The metric UID and the (tagk UID, tagv UID) pairs, in the order ``tags`` gives them.

        One series of :meth:`resolve_many_for_write`; its error (NoSuchUniqueName when a
        name is refused, NameTooLong, a storage error) raises. The pairs are not re-sorted:
        the row key orders tags by tagk UID bytes, which is the row-key encoder's job.
        """
        (result,) = await self.resolve_many_for_write([(metric, tuple(tags))])
        if isinstance(result, TsdError):
            raise result
        return result

    async def resolve_many_for_write(
        self, series: Sequence[tuple[str, Sequence[tuple[str, str]]]]
    ) -> list[Resolved | TsdError]:
        """:meth:`resolve_for_write` for many series at once: per series, its metric UID and
        tag UID pairs, or the error of its first name that failed: NoSuchUniqueName (auto-
        create refused it), NameTooLong, or a storage error or UidAssignmentError.
        :meth:`resolve_names` resolves the names; :meth:`ResolvedNames.result` is one
        series' answer."""
        names = await self.resolve_names(
            [metric for metric, _ in series], [tags for _, tags in series]
        )
        result = names.result
        return [result(metric, tags) for metric, tags in series]

    async def resolve_names(
        self, metrics: Sequence[str], tags_list: Sequence[Sequence[tuple[str, str]]]
    ) -> ResolvedNames:
        """The UIDs of every name of many series (``metrics[i]`` with ``tags_list[i]``),
        as three ``{name: uid}`` maps with the errors of the names that failed.

        Each kind's names are resolved in one :meth:`UniqueId.get_or_create_ids` batch (a
        few storage round trips however many are new), new names getting their UIDs in the
        order they first appear. Metrics first: a series whose metric is refused creates no
        tag UIDs. A name that fails fails only the series that use it. The ingest service
        makes a burst's row-key templates from the maps at once
        (:func:`tsd.codec.rowkey.series_keys`).
        """
        names = ResolvedNames()
        metric_uids = names.metric_uids = await self.metrics.get_or_create_ids(
            metrics, names.metric_errors
        )
        live: Sequence[Sequence[tuple[str, str]]] = tags_list
        if not metric_uids.keys() >= set(metrics):  # a metric refused: its tags are not
            live = [
                tags
                for metric, tags in zip(metrics, tags_list, strict=True)
                if metric in metric_uids
            ]
        # One kind after the other (not gathered): with every name cached, nothing suspends.
        # The names are taken out at C speed (a burst's batch is thousands of series).
        pairs = list(chain.from_iterable(live))
        names.key_uids = await self.tagk.get_or_create_ids(
            map(itemgetter(0), pairs), names.key_errors
        )
        names.value_uids = await self.tagv.get_or_create_ids(
            map(itemgetter(1), pairs), names.value_errors
        )
        return names

    # -- administration -----------------------------------------------------------------------

    def by_type(self, type_name: str) -> UniqueId:
        """The UniqueId for ``metric``/``metrics``, ``tagk`` or ``tagv`` (any case), as
        OpenTSDB's ``UniqueId.stringToUniqueIdType`` reads them."""
        lowered = type_name.lower()
        if lowered in ("metric", "metrics"):
            return self.metrics
        if lowered == "tagk":
            return self.tagk
        if lowered == "tagv":
            return self.tagv
        raise BadRequestError(f"Invalid type requested: {type_name}")

    def _strict_type(self, type_name: str) -> UniqueId:
        # TSDB.assignUid / renameUid accept exactly "metric", "tagk", "tagv" (any case).
        if type_name.lower() not in ("metric", "tagk", "tagv"):
            raise BadRequestError("Unknown type name")
        return self.by_type(type_name)

    async def assign(self, type_name: str, name: str) -> bytes:
        """OpenTSDB's ``TSDB.assignUid``: a new UID for ``name`` (type ``metric``, ``tagk`` or
        ``tagv``); UidAlreadyExists ("Name already exists with UID: 000001") when it has one.
        Names are expected to be validated by the caller."""
        return await self._strict_type(type_name).assign(name)

    async def assign_many(
        self, type_name: str, names: Sequence[str]
    ) -> dict[str, bytes | BaseException]:
        """:meth:`assign` of many names in batches (``UniqueId.assign_many``): each name's
        new UID or its error (UidAlreadyExists)."""
        return await self._strict_type(type_name).assign_many(names)

    async def rename(self, type_name: str, old_name: str, new_name: str) -> None:
        """OpenTSDB's ``TSDB.renameUid``; every failure is a BadRequestError whose message is
        OpenTSDB's (``Name("old") does not exist``, ``... new name already assigned ...``)."""
        uids = self._strict_type(type_name)
        try:
            await uids.get_id(old_name)
        except NoSuchUniqueName:
            raise BadRequestError(f'Name("{old_name}") does not exist') from None
        await uids.rename(old_name, new_name)

    def drop_caches(self) -> None:
        """Forget every cached mapping of the three kinds (``/api/dropcaches``)."""
        for uids in (self.metrics, self.tagk, self.tagv):
            uids.drop_caches()

    @property
    def stats(self) -> dict[str, UidStats]:
        """The counters of each kind, keyed by kind (``metrics``, ``tagk``, ``tagv``)."""
        return {uids.kind: uids.stats for uids in (self.metrics, self.tagk, self.tagv)}

    def cache_sizes(self) -> dict[str, int]:
        """Cached entries (both directions) per kind, as OpenTSDB's ``uid.cache-size``."""
        return {uids.kind: len(uids.cache) for uids in (self.metrics, self.tagk, self.tagv)}


def _error(failed: BaseException | None, refused: NoSuchUniqueName) -> TsdError:
    """A name's error: how it failed, else ``refused`` (auto-create refused it)."""
    if failed is None:
        return refused
    if isinstance(failed, TsdError):
        return failed
    raise failed  # not a TsdError (a bug, a cancellation): as before, for the whole call

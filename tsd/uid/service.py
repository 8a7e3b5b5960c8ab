"""UidService: the three UniqueId instances (metrics, tagk, tagv) of one TSD, from its Config.

The writer calls :meth:`UidService.resolve_for_write` once per data point; when every name is
cached it returns without suspending. The HTTP handlers and CLI tools use :meth:`by_type`,
:meth:`assign` and :meth:`rename`, which take OpenTSDB's type words.
"""

from __future__ import annotations

from collections.abc import Iterable

from tsd.config import Config
from tsd.errors import BadRequestError, NoSuchUniqueName
from tsd.storage.base import Storage
from tsd.uid.cache import UidCache
from tsd.uid.uniqueid import UidStats, UniqueId


class UidService:
    """The metrics, tagk and tagv UIDs of one UID table, each with its own bounded cache.

    Auto-create follows OpenTSDB: new metrics are refused unless
    ``tsd.core.auto_create_metrics``; new tag keys and values are created unless
    ``tsd.core.auto_create_tagks`` / ``auto_create_tagvs`` are turned off.
    """

    def __init__(self, storage: Storage, config: Config) -> None:
        table = config.storage.uid_table
        max_entries = config.uid.cache_max_entries
        self.metrics = UniqueId(
            storage,
            table,
            "metrics",
            config.storage.metric_width,
            UidCache(max_entries),
            auto_create=config.core.auto_create_metrics,
        )
        self.tagk = UniqueId(
            storage,
            table,
            "tagk",
            config.storage.tagk_width,
            UidCache(max_entries),
            auto_create=config.core.auto_create_tagks,
        )
        self.tagv = UniqueId(
            storage,
            table,
            "tagv",
            config.storage.tagv_width,
            UidCache(max_entries),
            auto_create=config.core.auto_create_tagvs,
        )

    # -- the write path -----------------------------------------------------------------------

    async def resolve_for_write(
        self, metric: str, tags: Iterable[tuple[str, str]]
    ) -> tuple[bytes, list[tuple[bytes, bytes]]]:
        """The metric UID and the (tagk UID, tagv UID) pairs, in the order ``tags`` gives them.

        Cached names are looked up synchronously; storage is awaited only on a miss. Names
        are resolved one after another, metric first, so a refused metric (NoSuchUniqueName)
        creates no tag UIDs. The pairs are not re-sorted: the row key orders tags by tagk
        UID bytes, which is the row-key encoder's job.
        """
        metrics, tagk, tagv = self.metrics, self.tagk, self.tagv
        metric_uid = metrics.cached_id(metric)
        if metric_uid is None:
            metric_uid = await metrics.get_or_create_id(metric)
        pairs: list[tuple[bytes, bytes]] = []
        for key, value in tags:
            key_uid = tagk.cached_id(key)
            if key_uid is None:
                key_uid = await tagk.get_or_create_id(key)
            value_uid = tagv.cached_id(value)
            if value_uid is None:
                value_uid = await tagv.get_or_create_id(value)
            pairs.append((key_uid, value_uid))
        return metric_uid, pairs

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

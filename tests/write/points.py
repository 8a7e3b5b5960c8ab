"""Adding points in tests that are about what happens after ingest (storage, compaction,
meta, queries): the series resolved by the real ingest service, the point buffered by the
real writer."""

from __future__ import annotations

from tsd.data_points import DataPoint
from tsd.write.ingest import IngestService
from tsd.write.writer import Ack


async def add(ingest: IngestService, point: DataPoint) -> Ack:
    """Resolve the point's series (maybe assigning UIDs) and buffer it; its batch's ack.
    Raises what resolving raises (NoSuchUniqueName with auto-create off)."""
    ref = await ingest.resolve(point.metric, point.tags)
    return ingest.writer.add_to(ref, point.timestamp, point.value)

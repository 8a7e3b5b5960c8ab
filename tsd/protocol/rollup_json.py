"""/api/rollup's body (RollupDataPointRpc: HttpJsonSerializer.parsePutV1 into
RollUpDataPoint, then IncomingDataPoint.validate and RollUpDataPoint.validate): /api/put's
body rules and binding (:mod:`tsd.protocol.put_json`) plus ``interval``, ``aggregator`` and
``groupByAggregator``. Pure."""

from __future__ import annotations

from typing import Final, cast

from tsd.protocol.put_json import (
    Incoming,
    bind_incoming,
    bind_string,
    incoming_error,
    load_put_elements,
    missing_field,
)
from tsd.protocol.put_reply import DatapointEcho, PutError
from tsd.protocol.rollup_put import RollupPoint

__all__ = ["parse_rollup_body"]

NULL_DATAPOINT: Final = "Unexpected null datapoint encountered in set."


def parse_rollup_body(body: bytes) -> list[tuple[RollupPoint, DatapointEcho] | PutError]:
    """The body's points (with the echo of each) or, for those that fail
    IncomingDataPoint.validate and RollUpDataPoint.validate, their errors. Raises
    BadRequestError for the body-level failures /api/put has."""
    bound: list[tuple[Incoming, str | None, str | None, str | None] | None] = []
    for element in load_put_elements(body):
        if element is None:
            bound.append(None)
            continue
        incoming = bind_incoming(element)
        assert isinstance(element, dict)
        bound.append(
            (
                incoming,
                bind_string(element.get("interval")),
                bind_string(element.get("aggregator")),
                bind_string(element.get("groupByAggregator")),
            )
        )
    results: list[tuple[RollupPoint, DatapointEcho] | PutError] = []
    for item in bound:
        if item is None:
            results.append(PutError(NULL_DATAPOINT, None))
            continue
        incoming, interval, aggregator, groupby = item
        echo = _echo(incoming, interval, aggregator, groupby)
        failed = missing_field(incoming, value=True)
        if failed is None and not groupby:
            if not interval:
                failed = "Missing interval"
            elif not aggregator:
                failed = "Missing aggregator"
        if failed is not None:
            results.append(PutError(failed, echo))
            continue
        assert incoming.metric is not None
        assert incoming.tags is not None
        value = incoming.value
        point = RollupPoint(
            incoming.metric,
            incoming.timestamp,
            value if isinstance(value, str) else str(value),
            cast(dict[str, str], incoming.tags),
            interval,
            aggregator,
            groupby,
            False,
        )
        results.append((point, echo))
    return results


def _echo(
    incoming: Incoming, interval: str | None, aggregator: str | None, groupby: str | None
) -> DatapointEcho:
    """RollUpDataPoint as Jackson writes it (NON_NULL): IncomingDataPoint's properties,
    then the rollup ones."""
    echo = incoming_error("", incoming).datapoint
    assert echo is not None
    extra = cast(dict[str, str], echo)
    for name, field in (
        ("interval", interval),
        ("aggregator", aggregator),
        ("groupByAggregator", groupby),
    ):
        if field is not None:
            extra[name] = field
    return echo

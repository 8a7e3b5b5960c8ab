"""The request path's parse (tsd/server/http/routing.py): kept for the paths clients send
again and again, in a cache a client cannot grow past its bound."""

from __future__ import annotations

from tsd.server.http.routing import PARSED_PATHS, parse_api_path


def test_parsed_paths_are_kept_up_to_their_bound() -> None:
    parse_api_path.cache_clear()
    paths = [f"/api/v1/query/{n}" for n in range(PARSED_PATHS + 100)]
    answers = [parse_api_path(path) for path in paths]
    assert parse_api_path.cache_info().currsize == PARSED_PATHS == 256
    # a path parsed again answers as the first time, whether it was kept or not
    assert [parse_api_path(path) for path in paths] == answers
    assert answers[0].route == "api/query"
    assert answers[0].parts == ("query", "0")
    assert answers[0].api_version == 1

"""Search ids carry their search: a log of another process (another worker, another replica,
the server restarted) places a turn from the id alone, as the issuing log would."""

from __future__ import annotations

import pytest

from toolselect.service.searches import ENCODED_TOOLS, Placement, SearchLog, decode

CATALOG = ("get_weather", "send_email", "mcp__fs__read_file", "web_search")


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def two_logs(capacity: int = 100, ttl_s: float = 3600.0) -> tuple[SearchLog, SearchLog, Clock]:
    clock = Clock()
    return SearchLog(capacity, ttl_s, clock), SearchLog(capacity, ttl_s, clock), clock


def test_another_log_places_a_turn_as_the_issuing_one_does() -> None:
    issuing, other, _ = two_logs()
    search_id = issuing.record(["send_email", "mcp__fs__read_file", "get_weather"], "mail")
    for used in ("send_email", "read_file", "get_weather", "web_search", "", "not_a_tool"):
        for pack in (None, "mail", "other"):
            assert other.place(search_id, used, pack, CATALOG) == issuing.place(
                search_id, used, pack, CATALOG
            ), (used, pack)
    assert other.place(search_id, "fs__read_file", None, CATALOG) == Placement(
        "shown", ("send_email", "mcp__fs__read_file", "get_weather"), 2
    )


def test_names_no_catalog_tool_has_are_read_back_blank() -> None:
    """A shown tool since removed leaves a blank in `shown`; the count (the turn's `shown_k`)
    stays right, and tools sharing a bare name are read back each as itself."""
    issuing, other, _ = two_logs()
    search_id = issuing.record(["removed_tool", "a__read", "get_weather"])
    catalog = ("a__read", "b__read", "get_weather")
    assert other.place(search_id, "get_weather", None, catalog) == Placement(
        "shown", ("", "a__read", "get_weather"), 3
    )
    assert other.place(search_id, "web_search", None, catalog) == Placement(
        "not_shown", ("", "a__read", "get_weather")
    )


@pytest.mark.parametrize("issued_here", [True, False])
def test_a_used_tool_is_placed_as_the_catalog_tool_it_stands_for(issued_here: bool) -> None:
    """Two MCP servers' `create_issue`: an agent reporting `mcp__jira__create_issue` found it
    where `jira__create_issue` stood, not where `github__create_issue` did; a bare name stands
    for either (the first shown), and a namespaced name whose tool was not shown is not_shown."""
    issuing, other, _ = two_logs()
    catalog = ("github__create_issue", "jira__create_issue", "get_weather")
    placing = issuing if issued_here else other
    both = issuing.record(["github__create_issue", "get_weather", "jira__create_issue"])
    for used, position in (
        ("mcp__jira__create_issue", 3),
        ("jira__create_issue", 3),
        ("mcp__github__create_issue", 1),
        ("create_issue", 1),
    ):
        assert placing.place(both, used, None, catalog).position == position, used
    github_only = issuing.record(["github__create_issue", "get_weather"])
    placed = placing.place(github_only, "mcp__jira__create_issue", None, catalog)
    assert (placed.status, placed.position) == ("not_shown", None)
    # Without a catalog (or for a name it lacks) the names are compared as they are.
    assert issuing.place(github_only, "mcp__jira__create_issue").status == "not_shown"
    assert issuing.place(github_only, "create_issue").position == 1


def test_own_forgotten_or_expired_ids_stay_unknown() -> None:
    """The issuing process places its ids from its log only: one it forgot (past its capacity)
    or let expire is unknown, as before ids carried their search; so is an expired id in
    another process."""
    issuing, other, clock = two_logs(capacity=1, ttl_s=60.0)
    first = issuing.record(["get_weather"])
    issuing.record(["send_email"])
    assert issuing.place(first, "get_weather", catalog=CATALOG).status == "unknown"
    assert other.place(first, "get_weather", catalog=CATALOG).status == "shown"
    clock.now += 61
    assert other.place(first, "get_weather", catalog=CATALOG).status == "unknown"


def test_another_tenants_ids_and_ids_that_carry_nothing_are_unknown() -> None:
    clock = Clock()
    a = SearchLog(100, 3600.0, clock, tenant="a")
    search_id = a.record(["get_weather"])
    assert SearchLog(100, 3600.0, clock, tenant="b").place(search_id, "get_weather").status == (
        "unknown"
    )
    assert SearchLog(100, 3600.0, clock, tenant="a").place(search_id, "get_weather").status == (
        "shown"
    )
    off = SearchLog(0, 3600.0, clock, tenant="a")  # TOOLSELECT_SEARCHES_KEPT=0: linking off
    assert decode(off.record(["get_weather"])) is None
    assert off.place(search_id, "get_weather").status == "unknown"


@pytest.mark.parametrize(
    "search_id",
    ["", "made-up", "!!!!", "a" * 255, "0" * 24, "AQ", "AQ" + "A" * 40, "\udcff", "é" * 10],
)
def test_ids_no_log_issued_are_unknown_never_an_error(search_id: str) -> None:
    assert SearchLog(100, 3600.0).place(search_id, "get_weather", "p", CATALOG) == Placement(
        "unknown"
    )


def test_an_id_names_its_first_tools_and_fits_a_turns_search_id() -> None:
    """However many tools were shown, the id stays within the 256 characters `observe` takes;
    a used tool past the ones it names cannot be told shown or not, so it is unknown."""
    issuing, other, _ = two_logs()
    shown = [f"tool_{i}" for i in range(1000)]
    search_id = issuing.record(shown)
    assert len(search_id) <= 256
    carried = decode(search_id)
    assert carried is not None and (carried.count, len(carried.tags)) == (1000, ENCODED_TOOLS)
    placed = other.place(search_id, f"tool_{ENCODED_TOOLS - 1}", None, shown)
    assert (placed.status, placed.position) == ("shown", ENCODED_TOOLS)
    assert (len(placed.shown), placed.count) == (ENCODED_TOOLS, 1000)  # a count, not 1000 names
    assert other.place(search_id, f"tool_{ENCODED_TOOLS}", None, shown).status == "unknown"
    assert issuing.place(search_id, f"tool_{ENCODED_TOOLS}", None, shown).position == (
        ENCODED_TOOLS + 1
    )


def test_every_search_gets_its_own_id() -> None:
    log = SearchLog(10, 3600.0, Clock())
    assert len({log.record(["get_weather"]) for _ in range(1000)}) == 1000


def test_the_tools_a_search_showed_are_read_back_however_old_its_id() -> None:
    """For a stored turn's search (a predecessor's id, long expired): the issuing log answers
    from its memory, another log from the id, blanks for names no one catalog tool has, and
    nothing for an id that carries nothing."""
    issuing, other, clock = two_logs(ttl_s=60.0)
    shown = ["send_email", "removed_tool", "get_weather"]
    search_id = issuing.record(shown)
    clock.now += 86_400.0
    assert issuing.shown(search_id, CATALOG) == tuple(shown)
    assert other.shown(search_id, CATALOG) == ("send_email", "", "get_weather")
    assert other.shown("not-an-id", CATALOG) == ()

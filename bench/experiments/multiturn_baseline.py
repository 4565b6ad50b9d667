"""Multi-turn baseline (`python -m bench.experiments.multiturn_baseline`): rank each user turn of
BFCL's dev multi-turn conversations (`bench/multiturn_data.py`: no `VehicleControlAPI` conversation
is ever loaded) with no learning, as the service would rank a request today.

Catalog: the 128 functions of the eight multi-turn API classes (`catalog="all"`), embedded with
`tool_text`, one `CentroidRanker` per embedder built as `bench/accuracy.py` builds it, with the
default description weight of the embedder (`Settings.centroid_description_weight`; with no
exemplars every centroid is the description vector, so the weight changes nothing yet).
Embedders: `hybrid` at the default weight and `hashing` (`bench.cache.Encoders`: MiniLM vectors
come from bench/out/cache/).

Queries per scored turn (a user message and at least one ground-truth call): `latest`, the
turn's own user message; `last3`, the last three user messages up to it joined by newlines
(oldest first; a first turn has only its own). Measures per turn, averaged over turns, against
`needed` (the distinct functions the turn's ground truth calls):
  share@5  the share of the needed tools in the top 5
  all@5    1 when every needed tool is in the top 5
  top1     1 when the top-1 tool is one of the needed
(`share@5 micro`, pooled over needed tools, and `share@10` are in the JSON.)

Turn sets: `dev` = the scored turns of multi_turn_base's dev conversations, `held` = those of
the held-out half (`traffic` is the other half); each split into `first` (turn 0) and
`follow_up` turns. Apart: `supplying`, miss_param's turns that supply the parameter a previous
message left out ("The specific file is previous_report.pdf."), and `restricted`, the same
rankings restricted to the conversation's own classes (what BFCL gives the model).

`observations` (no embeddings: the ground truth only, base category) count what a session
prior and companions could use: follow-up turns whose needed tools were needed earlier in the
conversation, tools used together in a turn and in the next turn in the traffic half and
whether the held-out half repeats them, and, for the misses of the `hybrid` / `latest`
baseline on the held-out half, which of them those signals would point at.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations, pairwise
from typing import Any

import numpy as np

from bench import OUT
from bench.cache import Encoders
from bench.conversations import DEPTH, K, measures
from bench.multiturn_data import Conversation, Dataset, Turn, load
from toolselect.catalog import tool_text
from toolselect.config import Settings
from toolselect.ranker import CentroidRanker

MODES: dict[str, int] = {"latest": 1, "last3": 3}  # user messages joined into the query
CATEGORY = "base"  # the scored conversations; miss_param adds the `supplying` turns
SUPPLYING_CATEGORY = "miss_param"


@dataclass(frozen=True, slots=True)
class Item:
    """A scored turn with its conversation."""

    conversation: Conversation
    turn: Turn
    held: bool


def query(turn: Turn, mode: str) -> str:
    return "\n".join(turn.recent(MODES[mode]))


def subsets(items: Sequence[Item]) -> dict[str, dict[str, list[int]]]:
    """Indices of `items` per half (`dev`, `held`) and per turn kind (`all`, `first`,
    `follow_up`)."""
    out: dict[str, dict[str, list[int]]] = {}
    for half, keep in (("dev", lambda it: True), ("held", lambda it: it.held)):
        chosen = [i for i, it in enumerate(items) if keep(it)]
        out[half] = {
            "all": chosen,
            "first": [i for i in chosen if items[i].turn.first],
            "follow_up": [i for i in chosen if not items[i].turn.first],
        }
    return out


def score(ranked: Sequence[Sequence[str]], items: Sequence[Item]) -> dict[str, Any]:
    return {
        half: {
            kind: measures([ranked[i] for i in idx], [items[i].turn.needed for i in idx])
            for kind, idx in kinds.items()
        }
        for half, kinds in subsets(items).items()
    }


def scored_items(data: Dataset, category: str, keep: Callable[[Turn], bool]) -> list[Item]:
    held = {c.id for c in data.held}
    return [
        Item(c, t, c.id in held)
        for c in data.conversations
        if c.category == category
        for t in c.scored
        if keep(t)
    ]


async def rank_embedder(
    data: Dataset, encoders: Encoders, kind: str, weight: float, groups: dict[str, list[Item]]
) -> dict[str, Any]:
    """Every turn group ranked by one embedder, whole catalog and restricted."""
    embedder = encoders.get(kind, weight)
    dw = Settings(embedder=kind).centroid_description_weight
    ranker = CentroidRanker(description_weight=dw, exemplar_weight=1.0)
    ranker.set_catalog(list(data.tools), await embedder.embed([tool_text(t) for t in data.tools]))
    out: dict[str, Any] = {
        "method": f"hybrid w={weight:g}" if kind == "hybrid" else kind,
        "embedder": embedder.id,
        "description_weight": dw,
    }
    rankings: dict[str, dict[str, list[tuple[str, ...]]]] = {}
    for group, items in groups.items():
        rankings[group] = {}
        for mode in MODES:
            vectors = await embedder.embed([query(it.turn, mode) for it in items])
            whole = [ranker.rank(v, DEPTH).tools for v in vectors]
            only = [
                ranker.rank(v, DEPTH, restrict=it.conversation.catalog).tools
                for v, it in zip(vectors, items, strict=True)
            ]
            rankings[group][mode] = whole
            out.setdefault(group, {})[mode] = {
                "catalog": score(whole, items),
                "restricted": score(only, items),
            }
    out["_rankings"] = rankings
    return out


# -- observations (ground truth only) ---------------------------------------------------------


def _pairs(turn: Turn) -> set[tuple[str, str]]:
    return set(combinations(sorted(turn.needed), 2))


def _transitions(conversation: Conversation) -> set[tuple[str, str]]:
    """(a, b): a needed in a scored turn, b in the next scored turn, a != b."""
    turns = conversation.scored
    return {(a, b) for s, t in pairwise(turns) for a in s.needed for b in t.needed if a != b}


def _rate(hits: int, n: int) -> dict[str, Any]:
    return {"n": n, "rate": hits / n if n else float("nan")}


def observations(
    data: Dataset, items: Sequence[Item], baseline: Sequence[Sequence[str]]
) -> dict[str, Any]:
    """Session and companion statistics; `baseline` ranks `items` (for the miss analysis)."""
    base = [c for c in data.conversations if c.category == CATEGORY]
    held_ids = {c.id for c in data.held}
    traffic = [c for c in base if c.id not in held_ids]
    held = [c for c in base if c.id in held_ids]
    out: dict[str, Any] = {}

    # Session: follow-up turns against what the conversation needed before.
    def seen(turn: Turn, last_only: bool = False) -> set[str]:
        calls = turn.earlier_calls[-1:] if last_only else turn.earlier_calls
        return {n for names in calls for n in names}

    def cls(name: str) -> set[str]:
        return {data.tool_class[name]}

    def classes(turn: Turn, last_only: bool = False) -> set[str]:
        return {data.tool_class[n] for n in seen(turn, last_only)}

    follow = [it.turn for it in items if not it.turn.first]
    share = [sum(1 for n in t.needed if n in seen(t)) / len(t.needed) for t in follow]
    out["follow_up_vs_earlier"] = {
        "turns": len(follow),
        "share_of_needed_needed_earlier": float(np.mean(share)) if share else float("nan"),
        "every_needed_needed_earlier": _rate(sum(s == 1.0 for s in share), len(share)),
        "some_needed_needed_earlier": _rate(sum(s > 0 for s in share), len(share)),
        "some_needed_in_previous_turn": _rate(
            sum(1 for t in follow if set(t.needed) & seen(t, last_only=True)), len(follow)
        ),
        "distinct_tools_earlier_mean": float(np.mean([len(seen(t)) for t in follow]))
        if follow
        else float("nan"),
        "share_of_needed_whose_class_was_needed_earlier": float(
            np.mean(
                [sum(1 for n in t.needed if cls(n) <= classes(t)) / len(t.needed) for t in follow]
            )
        )
        if follow
        else float("nan"),
        "same_classes_as_previous_turn": _rate(
            sum(
                1
                for t in follow
                if {data.tool_class[n] for n in t.needed} <= classes(t, last_only=True)
            ),
            len(follow),
        ),
    }
    out["conversation_catalog_size"] = {
        "mean": float(np.mean([len(c.catalog) for c in base])),
        "min": min(len(c.catalog) for c in base),
        "max": max(len(c.catalog) for c in base),
        "classes_mean": float(np.mean([len(c.classes) for c in base])),
    }
    multi = [it.turn for it in items if len(it.turn.needed) > 1]
    out["turns_needing_several_classes"] = _rate(
        sum(1 for t in multi if len({data.tool_class[n] for n in t.needed}) > 1), len(multi)
    )

    # Companions in a turn, and next-turn transitions: traffic half against held-out half.
    def by_conversation(
        conversations: Iterable[Conversation], of: Callable[[Conversation], set[tuple[str, str]]]
    ) -> Counter[tuple[str, str]]:
        counts: Counter[tuple[str, str]] = Counter()
        for c in conversations:
            counts.update(of(c))
        return counts

    def in_turns(c: Conversation) -> set[tuple[str, str]]:
        return {p for t in c.scored for p in _pairs(t)}

    for label, of in (("together_in_turn", in_turns), ("next_turn", _transitions)):
        learn = by_conversation(traffic, of)
        test = by_conversation(held, of)
        occurrences = [p for c in held for p in of(c)]
        partners_of: Counter[str] = Counter(a for a, _ in learn)
        if label == "together_in_turn":
            partners_of.update(b for _, b in learn)
        out[label] = {
            "traffic_distinct": len(learn),
            "traffic_in_2plus_conversations": sum(1 for v in learn.values() if v >= 2),
            "traffic_top": [[*p, v] for p, v in learn.most_common(8)],
            # how many candidates the signal offers per tool that has any
            "traffic_partners_per_tool_mean": float(np.mean(list(partners_of.values())))
            if partners_of
            else float("nan"),
            "held_distinct": len(test),
            "held_distinct_seen_in_traffic": _rate(sum(1 for p in test if p in learn), len(test)),
            "held_per_conversation_seen_in_traffic": _rate(
                sum(1 for p in occurrences if p in learn), len(occurrences)
            ),
            "held_per_conversation_seen_twice_in_traffic": _rate(
                sum(1 for p in occurrences if learn[p] >= 2), len(occurrences)
            ),
        }
    held_multi = [it.turn for it in items if it.held and len(it.turn.needed) > 1]
    learn_pairs = by_conversation(traffic, in_turns)
    out["together_in_turn"]["held_turns_all_pairs_seen"] = _rate(
        sum(1 for t in held_multi if all(p in learn_pairs for p in _pairs(t))), len(held_multi)
    )

    # Misses of the baseline on the held-out half: which signal points at them.
    partners: dict[str, Counter[str]] = {}
    for c in traffic:
        for t in c.scored:
            for a, b in _pairs(t):
                partners.setdefault(a, Counter())[b] += 1
                partners.setdefault(b, Counter())[a] += 1
    nexts: dict[str, Counter[str]] = {}
    for c in traffic:
        for a, b in _transitions(c):
            nexts.setdefault(a, Counter())[b] += 1
    missed = recovered_session = recovered_companion = recovered_next = recovered_any = 0
    recovered_class = 0
    for it, tools in zip(items, baseline, strict=True):
        if not it.held:
            continue
        top = tools[:K]
        earlier = seen(it.turn)
        previous = seen(it.turn, last_only=True)
        for n in it.turn.needed:
            if n in top:
                continue
            missed += 1
            session = n in earlier
            companion = any(partners.get(t, Counter())[n] > 0 for t in top[:1])
            following = any(nexts.get(p, Counter())[n] > 0 for p in previous)
            recovered_session += session
            recovered_companion += companion
            recovered_next += following
            recovered_any += session or companion or following
            recovered_class += cls(n) <= classes(it.turn)
    out["held_misses_hybrid_latest"] = {
        "missed_needed_tools": missed,
        "needed_earlier_in_conversation": _rate(recovered_session, missed),
        "traffic_companion_of_top1": _rate(recovered_companion, missed),
        "traffic_next_turn_of_a_previous_turn_tool": _rate(recovered_next, missed),
        "any_of_these": _rate(recovered_any, missed),
        "class_needed_earlier_in_conversation": _rate(recovered_class, missed),
    }
    return out


# -- entry ------------------------------------------------------------------------------------


def run(data: Dataset, encoders: Encoders) -> dict[str, Any]:
    started = time.perf_counter()
    groups = {
        CATEGORY: scored_items(data, CATEGORY, lambda t: True),
        "supplying": scored_items(data, SUPPLYING_CATEGORY, lambda t: t.answers_unanswered),
    }
    texts = [tool_text(t) for t in data.tools]
    texts += [query(it.turn, m) for items in groups.values() for it in items for m in MODES]
    t0 = time.perf_counter()
    asyncio.run(encoders.minilm.embed(texts))
    encoders.save()
    prepare_s = time.perf_counter() - t0
    print(f"  MiniLM cache ready ({encoders.minilm.misses} new texts, {prepare_s:.0f} s)")
    methods = []
    for kind, weight in (("hybrid", Settings().hybrid_weight), ("hashing", 0.5)):
        methods.append(asyncio.run(rank_embedder(data, encoders, kind, weight, groups)))
    baseline = methods[0]["_rankings"][CATEGORY]["latest"]
    notes = observations(data, groups[CATEGORY], baseline)
    for m in methods:
        del m["_rankings"]
    return {
        "dataset": data.counts,
        "scored": {g: len(items) for g, items in groups.items()},
        "k": K,
        "modes": {m: f"last {n} user message(s) joined by newlines" for m, n in MODES.items()},
        "methods": methods,
        "observations": notes,
        "minilm_prepare_s": prepare_s,
        "took_s": time.perf_counter() - started,
    }


def baseline_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The baseline, a row per method, query and turn set: base turns on the whole catalog,
    then the extras."""
    rows: list[dict[str, Any]] = []
    groups = [
        (CATEGORY, "catalog", half, kind)
        for half in ("dev", "held")
        for kind in ("all", "first", "follow_up")
    ]
    groups += [(CATEGORY, "restricted", half, "all") for half in ("dev", "held")]
    groups += [("supplying", "catalog", half, "all") for half in ("dev", "held")]
    for m in result["methods"]:
        for group, scope, half, kind in groups:
            for mode in MODES:
                if kind == "first" and mode != "latest":
                    continue  # a first turn has one message: both queries are the same
                r = m[group][mode][scope][half][kind]
                what = f"{half} {kind}" if group == CATEGORY else f"{half} {group}"
                if scope == "restricted":
                    what += " (own classes only)"
                rows.append(
                    {"method": m["method"], "query": mode, "turns": what, "n": r["n"],
                     "share5": round(r["share5"], 4), "all5": round(r["all5"], 4),
                     "top1": round(r["top1"], 4)}
                )  # fmt: skip
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--catalog", choices=("all", "dev"), default="all")
    parser.add_argument("--out", default=str(OUT / "multiturn.json"))
    args = parser.parse_args(argv)
    from bench.perf.machine import recorded

    started = time.perf_counter()
    data = load(catalog=args.catalog)
    print(
        f"multiturn: {data.counts['tools']} tools, "
        f"{len(data.traffic)} traffic / {len(data.held)} held conversations",
        flush=True,
    )
    result = recorded(lambda: run(data, Encoders()))
    result["wall_s"] = time.perf_counter() - started
    print(json.dumps(baseline_rows(result), indent=1))
    print(json.dumps(result["observations"], indent=1))
    with open(args.out, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(result, indent=1) + "\n")
    print(f"multiturn: wrote {args.out} in {result['wall_s']:.0f} s", flush=True)


if __name__ == "__main__":
    main()

"""Seeded synthetic catalogs and agent-like queries every section ranks, cached in bench/out/.

The demo catalog comes first, then `service__action_object` tools up to the size asked, so
100, 1,000 and 10,000 tools are prefixes of one catalog and the sizes compare like for like.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
from pathlib import Path
from typing import Any

import numpy as np

from bench import OUT
from toolselect.catalog import load_demo_catalog, parse_tools
from toolselect.embed import Embedder
from toolselect.records import Tool

SEED = 20240611

_SERVICES_TEXT = """
github gitlab jira slack gmail outlook gcal notion confluence salesforce hubspot stripe
shopify zendesk asana trello linear dropbox gdrive s3 postgres mysql redis mongo k8s
docker ec2 gcp azure twilio sendgrid spotify youtube twitter reddit weather maps finance
discord figma airtable datadog pagerduty sentry translate wiki arxiv news calendly
intercom
"""
_SERVICES = tuple(_SERVICES_TEXT.split())
_ACTIONS = {
    "get": ("Get", "show me", "what is", "look up"),
    "list": ("List", "list all", "show every", "give me the"),
    "create": ("Create", "create a new", "make a", "open a new"),
    "update": ("Update", "update the", "change the", "edit the"),
    "delete": ("Delete", "delete the", "remove the", "get rid of the"),
    "search": ("Search for", "search for", "find", "look for"),
    "send": ("Send", "send a", "post a", "share a"),
    "archive": ("Archive", "archive the", "put away the", "file away the"),
    "export": ("Export", "export the", "download a copy of the", "dump the"),
    "assign": ("Assign", "assign the", "give the", "hand over the"),
    "close": ("Close", "close the", "resolve the", "mark as done the"),
    "comment": ("Comment on", "comment on the", "reply to the", "add a note to the"),
    "upload": ("Upload", "upload the", "attach the", "push the"),
    "schedule": ("Schedule", "schedule the", "plan the", "book the"),
    "cancel": ("Cancel", "cancel the", "call off the", "stop the"),
    "summarize": ("Summarize", "summarize the", "give me a summary of the", "tl;dr the"),
    "sync": ("Synchronise", "sync the", "refresh the", "mirror the"),
    "tag": ("Tag", "tag the", "label the", "categorise the"),
    "move": ("Move", "move the", "relocate the", "transfer the"),
    "approve": ("Approve", "approve the", "sign off on the", "accept the"),
}
_OBJECTS_TEXT = """
issue pull_request message channel email event page document contact deal invoice
payment order customer ticket task board card file folder bucket table row record secret
pod deployment container instance user team project playlist video post thread report
alert incident dashboard metric repository branch release label note meeting reminder
subscription refund product
"""
_OBJECTS = tuple(_OBJECTS_TEXT.split())
_QUALIFIERS = (
    "from last week",
    "for the marketing team",
    "about the login bug",
    "that Alice mentioned",
    "for project apollo",
    "before friday",
    "with high priority",
    "in the staging environment",
    "for customer 4411",
    "from this morning",
    "",
    "",
)
_PARAMS = {
    "id": "Identifier of the {o}",
    "query": "Free-text filter for {o}s",
    "limit": "Maximum number of {o}s to return",
    "title": "Title of the {o}",
    "body": "Text content of the {o}",
    "owner": "Who owns the {o}",
    "due_date": "When the {o} is due (ISO 8601)",
    "tags": "Tags to attach to the {o}",
}


def _words(name: str) -> str:
    return name.replace("_", " ")


def synth_catalog(n: int, seed: int = SEED) -> list[dict[str, Any]]:
    """`n` native tool dicts: the demo catalog first, then seeded `service__action_object` tools."""
    rng = random.Random(seed)
    tools = [
        {"name": t.name, "description": t.description, "input_schema": dict(t.input_schema)}
        for t in load_demo_catalog()
    ][:n]
    combos = [(s, a, o) for s in _SERVICES for a in _ACTIONS for o in _OBJECTS]
    rng.shuffle(combos)
    taken = {t["name"] for t in tools}
    fresh = [c for c in combos if f"{c[0]}__{c[1]}_{c[2]}" not in taken]
    for service, action, obj in fresh[: n - len(tools)]:
        verb = _ACTIONS[action][0]
        what = _words(obj)
        params = rng.sample(sorted(_PARAMS), rng.randint(1, 4))
        tools.append(
            {
                "name": f"{service}__{action}_{obj}",
                "description": (
                    f"{verb} a {what} in {service.capitalize()}. "
                    f"{rng.choice(('Returns', 'Responds with', 'Gives back'))} the {what} "
                    f"{rng.choice(('as JSON', 'with its metadata', 'and its id', 'fields'))}; "
                    f"{rng.choice(('needs', 'requires', 'uses'))} "
                    f"{service.capitalize()} {rng.choice(('credentials', 'an API token', 'OAuth'))}."
                ),
                "input_schema": {
                    "type": "object",
                    "properties": {
                        p: {"type": "string", "description": _PARAMS[p].format(o=what)}
                        for p in params
                    },
                },
            }
        )
    return tools


def synth_queries(tools: list[dict[str, Any]], n: int, seed: int = SEED + 1) -> list[str]:
    """`n` agent-like requests, each aimed at a random synthetic tool (seeded)."""
    rng = random.Random(seed)
    named = [t["name"] for t in tools if _synthetic(t["name"])] or [t["name"] for t in tools]
    queries = []
    for _ in range(n):
        name = rng.choice(named)
        if _synthetic(name):
            service, rest = name.split("__", 1)
            action, obj = rest.split("_", 1)
            phrase = rng.choice(_ACTIONS[action][1:])
            text = f"{phrase} {_words(obj)} {rng.choice(_QUALIFIERS)} in {service}"
        else:
            text = f"please {_words(name)} {rng.choice(_QUALIFIERS)}"
        queries.append(" ".join(text.split()))
    return queries


def _synthetic(name: str) -> bool:
    service, _, rest = name.partition("__")
    return service in _SERVICES and rest.split("_", 1)[0] in _ACTIONS


def as_tools(dicts: list[dict[str, Any]]) -> list[Tool]:
    tools, _ = parse_tools({"tools": dicts})
    return tools


def catalog_file(n: int) -> Path:
    """The synthetic catalog of `n` tools as a native JSON file (for `toolselect tools import`)."""
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"catalog_{n}.json"
    if not path.exists():
        path.write_text(json.dumps({"tools": synth_catalog(n)}), encoding="utf-8")
    return path


def embed_cached(embedder: Embedder, texts: list[str]) -> np.ndarray:
    """Vectors of `texts`, cached in bench/out/ by embedder id and content (MiniLM is slow)."""
    digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
    path = OUT / f"vectors_{embedder.id}_{len(texts)}_{digest}.npy"
    if path.exists():
        cached: np.ndarray = np.load(path)
        return cached
    vectors = asyncio.run(embedder.embed(texts))
    if embedder.id.startswith("hashing"):
        return vectors  # seconds to recompute: not worth 80 MB of disk
    OUT.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors

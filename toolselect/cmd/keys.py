"""`toolselect keys create|list|revoke`: API keys on the configured store, without a server.

Like `toolselect analytics`, these open the store alone (no embedder, no ranker). A running
server takes a key created or revoked here within its poll interval (`TOOLSELECT_POLL_INTERVAL`).
Imports are deferred to the command, so registering the commands costs `toolselect`'s start
nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolselect.records import ApiKey
    from toolselect.store.port import Store

ROLE_CHOICES = ("agent", "editor", "admin")  # keys.ROLES, spelled out: no import at start


def _key_json(key: ApiKey) -> dict[str, Any]:
    """A key as listed: never the key itself, nor its hash."""
    out: dict[str, Any] = {
        "id": key.id,
        "prefix": key.prefix,
        "tenant": key.tenant,
        "role": key.role,
        "created_at": key.created_at.isoformat(),
    }
    if key.name is not None:
        out["name"] = key.name
    if key.revoked_at is not None:
        out["revoked_at"] = key.revoked_at.isoformat()
    return out


def _on_store(args: argparse.Namespace, body: Callable[[Store], Awaitable[int]]) -> int:
    """Run `body` on the configured store (migrated first, closed after)."""
    import asyncio

    from toolselect.config import load_settings
    from toolselect.logs import configure_logging
    from toolselect.store.factory import open_store

    settings = load_settings().override(store=args.store)
    configure_logging("warning", settings.log_format)

    async def run() -> int:
        store = await open_store(settings)
        try:
            await store.migrate()
            return await body(store)
        finally:
            await store.close()

    return asyncio.run(run())


def cmd_keys_create(args: argparse.Namespace) -> int:
    """Store a new key and print it (JSON, with `key`): the one time it is shown."""
    from toolselect.clock import utc_now
    from toolselect.keys import new_key

    secret, key = new_key(args.tenant, args.role, utc_now(), name=args.name)

    async def body(store: Store) -> int:
        await store.save_key(key)
        print(json.dumps({"key": secret, **_key_json(key)}, ensure_ascii=False))
        print("the key is shown only this once: keep it now", file=sys.stderr)
        return 0

    return _on_store(args, body)


def cmd_keys_list(args: argparse.Namespace) -> int:
    """One line per key (revoked ones too), or `--json`: never a key or its hash."""
    from toolselect.keys import check_tenant

    tenant = None if args.tenant is None else check_tenant(args.tenant)

    async def body(store: Store) -> int:
        keys = await store.list_keys(tenant)
        if args.json:
            print(json.dumps({"keys": [_key_json(k) for k in keys]}, ensure_ascii=False))
            return 0
        for k in keys:
            state = f"revoked {k.revoked_at.isoformat()}" if k.revoked_at else "active"
            created = k.created_at.isoformat(timespec="seconds")
            print(f"{k.id}  {k.prefix}…  {k.tenant}  {k.role}  {created}  {state}  {k.name or ''}")
        return 0

    return _on_store(args, body)


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    """Revoke a key by id; exit 1 when no key has it."""
    from toolselect.errors import NotFound
    from toolselect.keys import shown

    async def body(store: Store) -> int:
        if not await store.revoke_key(args.id):
            raise NotFound(f"no API key with id {shown(args.id)}")
        print(json.dumps({"id": args.id, "revoked": True}))
        return 0

    return _on_store(args, body)


def add_key_commands(sub: Any) -> None:
    """Register `keys create|list|revoke` on the CLI's subcommands (`sub`)."""
    keys = sub.add_parser("keys", help="manage API keys: tenants and roles").add_subparsers(
        dest="keys_command", required=True
    )

    def command(name: str, text: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = keys.add_parser(name, help=text)
        parser.add_argument("--store", help="neo4j or sqlite:PATH (default: from settings)")
        return parser

    create = command("create", "create a key and print it (shown only this once)")
    create.add_argument("--tenant", required=True, help="the tenant the key belongs to")
    create.add_argument("--role", required=True, choices=ROLE_CHOICES)
    create.add_argument("--name", help="what the key is for, shown in listings")
    create.set_defaults(func=cmd_keys_create)
    lst = command("list", "list keys (never the keys themselves)")
    lst.add_argument("--tenant", help="only this tenant's keys")
    lst.add_argument("--json", action="store_true")
    lst.set_defaults(func=cmd_keys_list)
    revoke = command("revoke", "revoke a key by id (refused everywhere within the poll interval)")
    revoke.add_argument("id")
    revoke.set_defaults(func=cmd_keys_revoke)

"""Request and response models of the key management routes (`api/key_routes.py`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from toolselect.keys import MAX_NAME, TENANT_PATTERN
from toolselect.records import ApiKey, Role


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class KeyCreateRequest(_Strict):
    tenant: str = Field(
        description="The tenant the key belongs to (`default` is the built-in one).",
        json_schema_extra={"pattern": TENANT_PATTERN},
    )
    role: Role = Field(
        description="`agent` (rank, select, observe), `editor` (also the catalog, labels and "
        "analytics) or `admin` (also the keys, on any tenant)."
    )
    name: str | None = Field(
        default=None,
        description="What the key is for, shown in listings.",
        json_schema_extra={"minLength": 1, "maxLength": MAX_NAME},
    )


class KeyOut(_Strict):
    """A key as listed: never the key, nor its hash."""

    id: str
    prefix: str = Field(description="The key's first 12 characters, to recognise it by.")
    tenant: str
    role: Role
    name: str | None = None
    created_at: str
    revoked_at: str | None = None

    @classmethod
    def of(cls, key: ApiKey) -> KeyOut:
        return cls(
            id=key.id,
            prefix=key.prefix,
            tenant=key.tenant,
            role=key.role,
            name=key.name,
            created_at=key.created_at.isoformat(),
            revoked_at=None if key.revoked_at is None else key.revoked_at.isoformat(),
        )


class KeyCreated(KeyOut):
    key: str = Field(description="The key itself: shown this once, never stored.")


class KeyList(_Strict):
    keys: list[KeyOut]


class KeyRevoked(_Strict):
    id: str
    revoked: bool


class Whoami(_Strict):
    """The caller of `GET /v1/whoami`: what its key is, and the tenant the request acts on."""

    tenant: str = Field(
        description="The tenant the request acts on: the key's, or the one an admin names with "
        "`X-Toolselect-Tenant`."
    )
    role: Role
    key_id: str | None = Field(
        default=None,
        description="The key's id (`config:N` for the N-th of `TOOLSELECT_API_KEYS`); absent "
        "while no key exists at all.",
    )

"""The service: a composition root (`root.Service`, `parts.compose`), the live index that keeps
the ranker in step with the store, and the facades the API, the CLI and the MCP server call
(`ranking`, `catalog`, `learning`), and `tenants.TenantServices`, one service per tenant."""

from toolselect.service.catalog import IMPORT_BATCH, CatalogFacade
from toolselect.service.index import LiveIndex, Progress
from toolselect.service.learning import LearningFacade
from toolselect.service.parts import Parts, build_teacher, compose
from toolselect.service.ranking import RankingFacade
from toolselect.service.root import Service
from toolselect.service.tenants import TenantServices

__all__ = [
    "IMPORT_BATCH",
    "CatalogFacade",
    "LearningFacade",
    "LiveIndex",
    "Parts",
    "Progress",
    "RankingFacade",
    "Service",
    "TenantServices",
    "build_teacher",
    "compose",
]

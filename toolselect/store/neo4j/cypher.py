"""Load Cypher by name from the `cypher/` folder shipped in the wheel (package `toolselect.cypher`).

`query("queries/upsert_tools")` returns the text of `cypher/queries/upsert_tools.cypher`. Values
always travel as `$parameters`; nothing here formats values into query text.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from toolselect.errors import NotFound

_ROOT = resources.files("toolselect.cypher")


@cache
def query(name: str) -> str:
    """The text of `cypher/<name>.cypher`; raise `NotFound` for an unknown name."""
    resource = _ROOT.joinpath(*f"{name}.cypher".split("/"))
    if not resource.is_file():
        raise NotFound(f"no Cypher file named {name!r}")
    return resource.read_text(encoding="utf-8")


def names(folder: str) -> list[str]:
    """The names of the `.cypher` files in one folder, sorted (e.g. `schema`, `analytics`)."""
    directory = _ROOT.joinpath(folder)
    if not directory.is_dir():
        return []
    return sorted(
        f"{folder}/{entry.name.removesuffix('.cypher')}"
        for entry in directory.iterdir()
        if entry.name.endswith(".cypher")
    )


def statements(name: str) -> list[str]:
    """A file split into statements on `;` line ends (schema files hold several)."""
    text = "\n".join(
        line for line in query(name).splitlines() if not line.lstrip().startswith("//")
    )
    return [part.strip() for part in text.split(";") if part.strip()]

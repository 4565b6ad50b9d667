"""A small MCP server with three tools, started by the tests of `tools import --mcp`."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import MCPServer
from pydantic import Field

server = MCPServer("tiny")


@server.tool()
def lookup_invoice(
    invoice_id: Annotated[str, Field(description="The invoice number, e.g. INV-1024.")],
) -> str:
    """Look up an invoice by its number: amount, due date and payment status."""
    return f"invoice {invoice_id}"


@server.tool()
def translate_text(
    text: Annotated[str, Field(description="The text to translate.")],
    target_language: Annotated[str, Field(description="ISO 639-1 code of the language.")],
) -> str:
    """Translate text into another language."""
    return text


@server.tool()
def roll_dice(sides: int = 6) -> int:
    """Roll a die with the given number of sides."""
    return sides


if __name__ == "__main__":
    server.run("stdio")

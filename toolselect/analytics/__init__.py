"""The named analyses of the learning loop (CLI `toolselect analytics`, `GET /v1/analytics`).

- `registry`: the analyses (names, columns, chart kind) and `finish()`, the one place both stores
  round, merge and order raw rows; the stores import only this module.
- `render`: a result as a terminal table, CSV or JSON.
- `charts`: a result as a PNG (matplotlib, optional, imported only when drawing).
- `surfaces`: the HTTP/MCP payloads and the CLI command built from the three above.

Kept free of imports so that a store importing `registry` does not load rendering or plotting.
Adding an analysis: `CONTRIBUTING.md`, "Adding an analysis".
"""

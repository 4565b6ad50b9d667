"""Persistence: the Store contract and its Neo4j and embedded (SQLite) implementations."""

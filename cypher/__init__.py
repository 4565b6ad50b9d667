"""Cypher files shipped as package data (`toolselect.cypher`); loaded by name, never formatted."""

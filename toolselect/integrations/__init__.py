"""Adapters that put toolselect where agent runtimes already look for tools."""

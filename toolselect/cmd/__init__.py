"""The `toolselect` command line."""

"""toolselect.api."""

"""toolselect.oracle."""

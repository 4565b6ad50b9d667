"""toolselect.cmd."""

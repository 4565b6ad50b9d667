"""toolselect.learn."""

"""toolselect.embed."""

"""The dashboard's static files (`GET /ui`), served by `toolselect.api.ui`."""

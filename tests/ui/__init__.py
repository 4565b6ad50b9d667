"""Dashboard tests: the /ui route, and the page in a real headless Chromium."""

"""toolselect: decides which tools an LLM agent should see for a turn, and learns from the turns."""

__version__ = "0.1.0"

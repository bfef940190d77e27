"""memoryhub: multi-tenant memory for AI agents, as a reusable Django app."""

__version__ = "0.1.0"

"""Adapters that plug memoryhub into agent frameworks (each needs its extra)."""

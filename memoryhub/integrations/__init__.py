"""Adapters that plug memoryhub's stores into agent frameworks (each needs its extra)."""

"""Adapters that give other agent frameworks' memory interfaces a memoryhub store."""

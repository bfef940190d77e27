"""Measures of memoryhub's own code, run as modules (``python -m memoryhub.tools.layers``)."""

"""Tenancy for memoryhub: organisations, their domains, operator memberships, API keys."""

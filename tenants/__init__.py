"""Tenancy: organisations, their domains, operator memberships, API keys.

A reusable app of its own: it imports nothing of memoryhub, which builds on it (see
``tenants.admin`` for how another app extends its admin)."""

"""Shared fixtures. Backend-parametrised fixtures live in tests/storage/conftest.py."""

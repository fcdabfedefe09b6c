"""Test-only helpers shared by several test modules (not part of the installed library)."""

"""Checks: end-to-end agreement with other libraries that CI cannot run."""

"""Integrations with other systems, each behind its own optional extra."""

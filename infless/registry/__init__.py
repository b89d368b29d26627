"""Deployed functions: validation of deployments and their persistence in SQLite."""

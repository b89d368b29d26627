"""Offline tools: evaluations, replays and reports that run beside infless, never inside it.

The running server (`infless.app`, `control`, `gateway`, `dataplane`, `workers`) must not
import this package; an import contract in pyproject.toml checks it. Tools here may import
the runtime's pure policies, and the load generator's trace parser and arrival generator.
"""

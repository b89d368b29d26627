"""infless load generator: trace replays and synthetic loads against a gateway, over HTTP only.

Owns workloads (pure schedules), the open-loop client, and reports. Must not import `infless`:
it is a client like any other, so it can also drive other OpenFaaS-style servers.
"""

__version__ = "0.1.0"

"""Worker processes: the wire protocol, the gateway-side handle and pool, and the worker main."""

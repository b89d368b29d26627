"""The HTTP gateway: OpenFaaS-compatible system routes, invocation, metrics, health."""

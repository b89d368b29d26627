"""Tenants separated by the kernel: the `[isolation]` section, each tenant's uid and gid, what
this host can enforce, and the sandbox each worker of a tenant enters (docs/security.md)."""

"""This server's resources: CPU cores (affinity, cgroups later) and GPUs."""

"""This server's resources: CPU cores (allocation, cgroups v1/v2, affinity) and GPUs (NVML
discovery, MPS shares)."""

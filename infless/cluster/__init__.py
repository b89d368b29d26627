"""This server's resources: CPU cores (allocation, cgroups v1/v2, affinity) and GPUs (NVML
discovery, or the fake devices of `[gpu] fake_devices`; one MPS daemon per GPU; the GPU
monitor that samples NVML for /metrics)."""

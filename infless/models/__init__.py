"""Function packages (manifest + safetensors weights) and the model zoo that builds them."""

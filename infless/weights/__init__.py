"""The shared tensor store (Tetris + TrIMS): gateway-side store and reclaimer, worker-side attach.

Gateway-side modules (`store`, `package_index`, `reclaimer`, `gpu_tier`) never import torch;
worker-side modules (`attach`, `gpu_cuda`) do. Nothing is imported here so that importing the
package stays cheap and torch-free.
"""

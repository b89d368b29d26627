"""The shared tensor store (Tetris + TrIMS): gateway-side store and reclaimer, worker-side attach,
and the GPU tier (its pure core, the holder process and the gateway's client of it).

Gateway-side modules (`store`, `package_index`, `reclaimer`, `gpu_tier`, `gpu_holder`,
`holder_protocol`, `gpu_fake`) never import torch; worker-side modules (`attach`, `gpu_cuda`)
and the holder process (`holder_main`, for CUDA) do. Nothing is imported here so that
importing the package stays cheap and torch-free.
"""

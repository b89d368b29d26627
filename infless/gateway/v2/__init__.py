"""The Open Inference Protocol (KServe v2 REST) with Triton's binary tensor data extension.

`datatypes` maps numpy dtypes to V2 datatypes, `codec` parses requests and encodes responses
(pure, numpy only), `infer` fans a batch out into a function's router and back, `routes`
serves health, metadata and readiness, `repository` maps load/unload to deploy/remove.
Gateway side: never imports torch.
"""

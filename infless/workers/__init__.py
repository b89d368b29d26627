"""The process boundary: the wire protocol, the gateway-side handle (and its in-process twin),
starting instances (process starter, launcher, zygote, fork server, templates) and the
worker main. Nothing here knows about batching, routing or scaling."""

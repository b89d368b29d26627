"""The control plane: what should run, and making it so.

`desired` (each function's wanted instances and their owner), `port` (the scaling port the
policies' shells talk to), `autoscaler` and `prewarm` (those shells), `pool` (this server's
reconciler, the port's target), `frontend` (every function's front door), `service`
(deploy, update, scale, remove) and `functions` (a deployed function's record). Gateway
side: never imports torch, never speaks HTTP.
"""

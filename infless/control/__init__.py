"""The control plane: what should run, and making it so.

- `desired`: each function's wanted instances and their owner.
- `port`: the scaling port the policies' shells talk to; `autoscaler` and `prewarm` are
  those shells.
- `pool`: this server's reconciler, the port's target. Its one loop (`reconcile`) takes
  events from one queue (`loop`, `events`).
- `instances`: the pool's instances and their transitions.
- `service`: deploy, update, scale, remove. `functions`: a deployed function's record.

The front door is the data plane's (`dataplane.frontdoor`). Gateway side: never imports
torch, never speaks HTTP.
"""

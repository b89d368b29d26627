"""The data plane: a request's way from the front door to a worker and back.

- `frontdoor` and `calls`: every function's front door, a call's steps as a state machine.
- `router`: a function's instances, cold starts and retries. `dispatcher`: rate-share
  routing. `queue`: an instance's batch queue. `instance`: one instance's serving loop over
  its `WorkerHandle`.
- `policy`, `admission`, `release`, `starting`: pure decisions, shared with the simulator.
- `request`, `activity`, `latency`: plain data and measurements (`lagprobe` feeds the
  event loop's lag). `views`: typed status.
- `events`: what it tells the control plane.

Gateway side: never imports torch. It never reaches up into the control plane: it posts
events (`events`) and is handed small protocols.
"""

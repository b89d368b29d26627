"""The data plane: a request's way from the front door to a worker and back.

`request` (a pending sample and its outcome), `activity` (what the request path tells the
control plane), `policy` (pure batching decisions), `queue` (an instance's batch queue),
`dispatcher` (rate-share routing), `router` (a function's instances, cold starts, retries)
and `instance` (one instance's serving loop over its `WorkerHandle`). Gateway side: never
imports torch; never reaches up into the control plane (it is handed callbacks).
"""

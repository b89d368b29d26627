"""Discrete-event simulation of many servers driven by the server's own control plane (the
same autoscaler and prewarm manager, through the scaling port), dispatcher and batch
policy — no processes, no wall clock (see `engine` and `cluster`)."""

"""Discrete-event simulation of many servers driven by the real scaling policies, dispatcher and
batch policy — no processes, no wall clock (see `engine`)."""

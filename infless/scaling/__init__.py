"""Autoscaling: demand estimation, Equation-1 bounds, §3.2 dispatch shares, Algorithm 1 and
the baseline policies, and the plan's types. Every module here is pure (state in, state out,
time as an argument); the autoscaler shell is `control.autoscaler`, behind the scaling port.
"""

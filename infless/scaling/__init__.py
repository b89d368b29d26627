"""Autoscaling: demand estimation, Equation-1 bounds, §3.2 dispatch shares, Algorithm 1 and
the baseline policies. Every module here is pure (state in, state out, time as an argument);
the autoscaler shell that applies plans to the worker pool lives outside these modules.
"""

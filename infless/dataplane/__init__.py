"""Built-in non-uniform batching: per-instance batch queues and the dispatcher feeding them."""

"""Many servers: node agents on Ray, and the gateway side that drives them (`infless.nodes`)."""

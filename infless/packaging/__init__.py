"""Making function packages from a user's model (`package`), naming them by content
(`digest`), and checking them the way a worker will load them (`verify`)."""

"""The CLI's side of the gateway API: a small HTTP client and the faas-cli-style commands."""

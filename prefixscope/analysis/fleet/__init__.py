"""The fleet: replicas behind a router, each with its own cache, under load (docs/fleet.md)."""

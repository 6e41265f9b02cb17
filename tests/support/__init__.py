"""Shared test helpers: real boards on loopback, clients, and waiting on conditions."""

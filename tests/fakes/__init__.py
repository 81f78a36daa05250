"""Fakes of remote services that speak the real wire protocols, for tests."""

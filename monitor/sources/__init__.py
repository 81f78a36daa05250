"""Adapters at the edge: everything that reads from outside gpucost lives here, behind protocols."""

from monitor.sources.base import BillingSource, QueryResult

__all__ = ["BillingSource", "QueryResult"]

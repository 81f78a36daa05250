"""The fleet simulator: a deterministic multi-GPU fleet on Google Cloud with injected hidden costs.

Writes the detailed billing export (bq-extract NDJSON and Parquet), Cloud Monitoring GPU
utilization JSON and the ground truth the detectors are measured against. See `layout` for what
the fleet holds and where the hidden costs go.
"""

from monitor.simulate.export import arrow_schema, to_export_json
from monitor.simulate.simulator import BILLING_FORMATS, DEFAULT_START, FleetSimulator, write_fleet

__all__ = [
    "BILLING_FORMATS",
    "DEFAULT_START",
    "FleetSimulator",
    "arrow_schema",
    "to_export_json",
    "write_fleet",
]

"""gpucost: what multi-GPU training really costs on Google Cloud."""

__version__ = "0.1.0"

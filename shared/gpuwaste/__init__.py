"""gpuwaste: find GPUs that burn money on Kubernetes, say whose they are, and price the waste in USD/day."""

__version__ = "0.1.0"

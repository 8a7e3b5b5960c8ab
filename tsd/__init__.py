"""tsd: an OpenTSDB-compatible time series daemon."""

__version__ = "0.1.0"

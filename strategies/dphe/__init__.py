"""DPHE secure aggregation: Flower glue (math in :mod:`crypto`)."""

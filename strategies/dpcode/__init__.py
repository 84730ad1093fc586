"""DPcode as federated analytics: Flower glue (math in :mod:`privacy.dpcode`)."""

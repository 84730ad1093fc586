"""DPHE secure aggregation: the strategy component, client/server set-up and keyholder streams (math in :mod:`crypto`)."""

"""FedHAP: Flower strategy and client trainer (math in :mod:`hashing.fedhap`)."""

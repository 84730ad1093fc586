"""PFMH: Flower strategy, client trainer and evaluator (math in :mod:`hashing.pfmh`)."""

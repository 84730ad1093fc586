"""Experiment drivers: in-process simulations, centralized ceiling, seed sweeps."""

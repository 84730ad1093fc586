"""Deployment helpers: credentials for the SuperLink/SuperNode/keyholder services."""

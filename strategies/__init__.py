"""The methods' Flower glue, one folder each; :mod:`strategies.registry` names them.

Importing this package imports nothing: the config sections
(``strategies/<method>/config.py``) stay importable without torch or Flower.
"""

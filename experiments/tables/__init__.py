"""One module per table or figure set: a library, run by its paper's driver.

``python -m experiments.<paper> <table> [flags]`` (``experiments/phashing.py``,
``fedhap.py``, ``pfmh.py``, ``dphe.py``, ``dpcode.py``, and ``project.py`` for the
tables of no paper) runs a module's ``main`` here; its default grids are in
``experiments/grids/<paper>.toml``.
"""

"""What a fresh ClientApp process imports (a deployment starts one per message).

scikit-learn and scipy.linalg cost about 2.5 s to import on the 2-core machine; only
the digits loaders and CSQ's Hadamard centres need them, so they are imported there
(benchmarks/clientapp_start.py measures the start).
"""

import numpy as np

from tests.fixtures import modules_after_import


def test_importing_the_client_app_leaves_sklearn_and_scipy_linalg_out() -> None:
    loaded = modules_after_import("clients.client_app")
    assert {"sklearn", "scipy.linalg"} & loaded == set()


def test_csq_centres_still_use_hadamard_rows_where_they_exist() -> None:
    from hashing.csq import hash_centers

    centres = hash_centers(4, 8)
    # Hadamard rows are mutually orthogonal: Gram matrix = bits * I
    gram = (centres @ centres.T).numpy()
    assert (gram == 8 * np.eye(4)).all()

"""Deep hashing core: models, losses, codes, retrieval metrics. No Flower imports."""

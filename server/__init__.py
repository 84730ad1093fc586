"""Server side: the ServerApp, node discovery, retrieval evaluation, results."""

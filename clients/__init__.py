"""Client side: the ClientApp, local data, local trainers, code publication."""

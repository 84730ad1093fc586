"""PFMH math (prototype-based federated multi-modal hashing): model, losses, prototypes, training, evaluation. No Flower."""

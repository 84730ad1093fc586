"""PFMH math: model, losses, prototypes, training, evaluation. No Flower."""

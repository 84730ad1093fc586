"""FedHAP math: local training, triplet losses, discriminator. No Flower."""

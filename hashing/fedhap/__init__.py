"""FedHAP math (paper: FedHAP, global hash prototypes): local training, triplet losses, discriminator. No Flower."""

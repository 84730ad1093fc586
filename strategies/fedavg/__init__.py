"""FedAvg / FedProx hashing baselines: Flower strategy and client trainer."""

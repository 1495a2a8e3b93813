"""The real network: PyTorch training by SGD as a discretised gradient flow, measured like the theory."""

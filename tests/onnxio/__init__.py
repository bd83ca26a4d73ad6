"""Loading and saving models: external data, tensors no library can hold."""

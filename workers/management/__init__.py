"""Management commands of the data plane."""

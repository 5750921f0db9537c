"""Template filters of the servers app (`{% load hidden_text %}`)."""
